"""The shipper on a fake file system, a fake producer and a fake clock: rotation kinds,
copytruncate, fingerprint collisions, partial last lines, deletes while open, the checkpoint,
rewinds on failed sends, back-pressure, long lines, --parse json, key templates."""
from __future__ import annotations

import os

import pytest

from cluster.producer.partitioner import partition_for_key
from cluster.tools.ship import checkpoint
from cluster.tools.ship.lines import cut
from cluster.tools.ship.records import KeyTemplate
from cluster.tools.ship.shipper import Shipper
from cluster.tools.ship.tailer import Tailer
from tests.cluster.tools.ship.fakes import FakeFiles, FakeProducer
from tests.support.clock import FakeClock


def make(files, *, patterns=("/l/*.log*",), once=False, restored=None, auto_ack=True,
         checkpoint_path=None, key="{file}", parse="none", max_line_bytes=100,
         overflow="split", read_bytes=64, max_buffer_bytes=1 << 20, from_end=False,
         producer=None, clock=None, partition_by_key=True):
    clock = clock or FakeClock(100.0)
    tailer = Tailer(files, patterns, clock, restored=restored, once=once, rotate_wait=1.0,
                    max_line_bytes=max_line_bytes, overflow=overflow, read_bytes=read_bytes,
                    from_end=from_end)
    producer = producer or FakeProducer(auto_ack)
    shipper = Shipper(producer, "logs", tailer, KeyTemplate(key, host="h"),
                      checkpoint_path=checkpoint_path, parse=parse, clock=clock,
                      sleep=clock.advance, max_buffer_bytes=max_buffer_bytes,
                      scan_interval=0.5, checkpoint_interval=0.0, progress_interval=0.0,
                      retry_backoff=1.0, partition_by_key=partition_by_key)
    shipper.start()
    return shipper, producer, clock


def turns(shipper, clock, seconds):
    end = clock() + seconds
    while clock() < end:
        shipper.turn()
        clock.advance(0.05)


def lines(n, prefix="line", start=0):
    return b"".join(b"%s %d\n" % (prefix.encode(), i) for i in range(start, start + n))


def test_once_ships_every_line_with_its_position_and_a_partial_last_line(tmp_path):
    files = FakeFiles()
    files.create("/l/a.log", b"one\r\ntwo\nthree")  # no newline at the end
    files.create("/l/b.log", lines(50))
    path = str(tmp_path / "ckpt")
    shipper, producer, clock = make(files, once=True, checkpoint_path=path)
    while shipper.turn():
        pass
    shipper.finish()
    sent = [(v, h["log.offset"]) for _, v, _, h in producer.sent
            if h["log.file.path"] == b"/l/a.log"]
    assert sent == [(b"one", b"0"), (b"two", b"5"), (b"three", b"9")]
    assert sorted(producer.values()) == sorted([b"one", b"two", b"three"]
                                               + lines(50).split(b"\n")[:-1])
    stored = checkpoint.load(path)
    assert sorted(e.position for e in stored.values()) == sorted([14, len(lines(50))])
    assert {e.path for e in stored.values()} == {"/l/a.log", "/l/b.log"}


def test_tail_holds_a_partial_line_until_its_newline():
    files = FakeFiles()
    files.create("/l/a.log", b"first\nsec")
    shipper, producer, clock = make(files)
    turns(shipper, clock, 2)
    assert producer.values() == [b"first"]
    files.append("/l/a.log", b"ond\n")
    turns(shipper, clock, 1)
    assert producer.values() == [b"first", b"second"]


def test_renamed_file_is_finished_before_the_new_one_and_not_read_twice():
    files = FakeFiles()
    files.create("/l/app.log", lines(10))
    shipper, producer, clock = make(files)
    turns(shipper, clock, 1)
    old = files.paths["/l/app.log"]
    files.rename("/l/app.log", "/l/app.log.1")  # logrotate: rename, then create
    files.create("/l/app.log", lines(5, "new"))
    files.data[old] += lines(3, "late", 0)  # the writer still had the old file open
    turns(shipper, clock, 0.6)  # a scan sees both; the new file waits for the old
    assert producer.values() == lines(10).split(b"\n")[:-1] + lines(3, "late").split(b"\n")[:-1]
    turns(shipper, clock, 3)  # the old file idle for rotate_wait: finished, the new one read
    expected = (lines(10) + lines(3, "late") + lines(5, "new")).split(b"\n")[:-1]
    assert producer.values() == expected
    keys = {k for _, _, k, _ in producer.sent}
    assert keys == {b"/l/app.log"}  # one source, one key: one partition, in order
    turns(shipper, clock, 3)
    assert producer.values() == expected  # app.log.1 matches the glob: not read again


def test_rotated_file_last_line_without_newline_ships_when_finished():
    files = FakeFiles()
    files.create("/l/app.log", b"a\nb-partial")
    shipper, producer, clock = make(files)
    turns(shipper, clock, 1)
    assert producer.values() == [b"a"]
    files.rename("/l/app.log", "/l/app.log.1")
    turns(shipper, clock, 3)
    assert producer.values() == [b"a", b"b-partial"]


def test_rotated_file_growing_a_line_in_pieces_is_not_finished_mid_line():
    # the writer kept the renamed file open and writes one line in several write() calls,
    # more slowly than rotate_wait overall: the file is not idle while it grows, so the
    # piece at its end is never shipped as a line of its own.
    files = FakeFiles()
    files.create("/l/app.log", b"a\n")
    shipper, producer, clock = make(files)
    turns(shipper, clock, 1)
    old = files.paths["/l/app.log"]
    files.rename("/l/app.log", "/l/app.log.1")
    for piece in (b"one ", b"long ", b"line ", b"in ", b"pieces"):
        files.data[old] += piece
        turns(shipper, clock, 0.6)
    files.data[old] += b"\n"
    turns(shipper, clock, 3)
    assert producer.values() == [b"a", b"one long line in pieces"]


def test_copytruncate_restarts_the_file_at_zero():
    files = FakeFiles()
    files.create("/l/app.log", lines(20))
    shipper, producer, clock = make(files, patterns=("/l/app.log",))
    turns(shipper, clock, 1)
    files.copy("/l/app.log", "/l/app.log.1")  # not matched by the glob
    files.truncate("/l/app.log")
    files.append("/l/app.log", lines(3, "after"))
    turns(shipper, clock, 2)
    assert producer.values() == (lines(20) + lines(3, "after")).split(b"\n")[:-1]
    assert shipper.tailer.truncations == 1
    ids = {h["log.file.id"] for _, _, _, h in producer.sent}
    assert len(ids) == 2  # a new identity after the truncation


def test_copytruncate_regrown_past_the_position_is_caught_by_the_fingerprint():
    files = FakeFiles()
    files.create("/l/app.log", lines(5))
    shipper, producer, clock = make(files, patterns=("/l/app.log",))
    turns(shipper, clock, 1)
    files.truncate("/l/app.log")
    files.append("/l/app.log", lines(40, "regrown"))  # longer than before, between scans
    turns(shipper, clock, 2)
    assert producer.values() == (lines(5) + lines(40, "regrown")).split(b"\n")[:-1]


def test_identical_first_lines_in_two_files_are_two_files():
    files = FakeFiles()
    header = b"# same header line in every file\n"
    files.create("/l/a.log", header + lines(3, "a"))
    files.create("/l/b.log", header + lines(3, "b"))
    shipper, producer, clock = make(files)
    turns(shipper, clock, 1)
    assert sorted(producer.values()) == sorted(
        [header[:-1]] * 2 + (lines(3, "a") + lines(3, "b")).split(b"\n")[:-1])


def test_inode_reused_with_the_same_first_line_after_a_restart_is_read_from_zero(tmp_path):
    path = str(tmp_path / "ckpt")
    files = FakeFiles()
    ino = files.create("/l/a.log", b"header\n" + lines(30))
    shipper, producer, clock = make(files, once=True, checkpoint_path=path)
    while shipper.turn():
        pass
    shipper.finish()
    files.remove("/l/a.log")
    files.create("/l/a.log", b"header\n" + lines(2, "fresh"), ino=ino)  # same inode, shorter
    shipper, producer, clock = make(files, once=True, restored=checkpoint.load(path))
    while shipper.turn():
        pass
    assert producer.values() == [b"header"] + lines(2, "fresh").split(b"\n")[:-1]


def test_inode_of_a_finished_rotated_file_reused_by_the_new_file_is_a_new_file():
    # logrotate's second rotation deletes the oldest copy (app.log.1 -> app.log.2 replaces
    # it); its inode, no longer held open by the shipper, is reused by the new app.log the
    # writer creates. The new file must be read from 0 as a new file, not taken for the
    # finished one and read on from its old end (mid-line: a fragment, and lines lost).
    files = FakeFiles()
    first = files.create("/l/app.log", lines(20, "first"))
    shipper, producer, clock = make(files)
    turns(shipper, clock, 1)
    files.rename("/l/app.log", "/l/app.log.1")
    files.create("/l/app.log", lines(3, "second"))
    turns(shipper, clock, 3)  # app.log.1 finished, acknowledged, its handle closed
    files.rename("/l/app.log.1", "/l/app.log.2")
    files.rename("/l/app.log", "/l/app.log.1")
    files.remove("/l/app.log.2")  # the oldest copy deleted: its inode is free
    files.create("/l/app.log", b"", ino=first)  # the writer's new file gets that inode
    turns(shipper, clock, 1)
    files.append("/l/app.log", lines(40, "third-file"))  # past the old end, mid-line there
    turns(shipper, clock, 3)
    assert producer.values() == (lines(20, "first") + lines(3, "second")
                                 + lines(40, "third-file")).split(b"\n")[:-1]
    third = [h for _, v, _, h in producer.sent if v.startswith(b"third-file")]
    assert third[0]["log.offset"] == b"0"
    assert third[0]["log.file.path"] == b"/l/app.log"
    assert len({h["log.file.id"] for _, _, _, h in producer.sent}) == 3


def test_file_deleted_while_open_is_read_to_its_end_then_forgotten(tmp_path):
    path = str(tmp_path / "ckpt")
    files = FakeFiles()
    files.create("/l/a.log", lines(4))
    shipper, producer, clock = make(files, checkpoint_path=path)
    turns(shipper, clock, 1)
    files.append("/l/a.log", lines(4, "more"))
    files.remove("/l/a.log")
    turns(shipper, clock, 4)
    assert producer.values() == (lines(4) + lines(4, "more")).split(b"\n")[:-1]
    assert shipper.tailer.tracked == []
    assert checkpoint.load(path) == {}


def test_crash_resends_only_what_followed_the_checkpoint_and_skips_nothing(tmp_path):
    path = str(tmp_path / "ckpt")
    files = FakeFiles()
    files.create("/l/a.log", lines(40))
    shipper, producer, clock = make(files, checkpoint_path=path, auto_ack=False)
    turns(shipper, clock, 1)
    producer.ack_all()  # the first 40 acknowledged
    turns(shipper, clock, 1)
    files.append("/l/a.log", lines(10, "unacked"))
    turns(shipper, clock, 1)  # sent, never acknowledged: the shipper "dies" here
    assert checkpoint.load(path)[shipper.tailer.tracked[0].id].position == len(lines(40))
    again, producer2, clock2 = make(files, checkpoint_path=path,
                                    restored=checkpoint.load(path))
    turns(again, clock2, 1)
    assert producer2.values() == lines(10, "unacked").split(b"\n")[:-1]


def test_failed_sends_rewind_the_file_and_nothing_is_lost():
    files = FakeFiles()
    files.create("/l/a.log", lines(30))
    shipper, producer, clock = make(files, auto_ack=False)
    turns(shipper, clock, 0.5)
    producer.fail_pending()  # delivery.timeout.ms passed while the cluster was down
    producer.auto_ack = True
    turns(shipper, clock, 3)
    assert shipper.resends == 1
    assert producer.delivered() == lines(30).split(b"\n")[:-1]


def test_reading_stops_while_the_buffer_is_full():
    files = FakeFiles()
    files.create("/l/a.log", lines(1000))
    shipper, producer, clock = make(files, auto_ack=False, max_buffer_bytes=500,
                                    read_bytes=100, max_line_bytes=20)
    turns(shipper, clock, 3)
    assert 0 < len(producer.sent) < 100  # about 500 bytes of lines, then nothing read
    for _ in range(200):
        producer.ack_all()
        turns(shipper, clock, 0.2)
    assert producer.values() == lines(1000).split(b"\n")[:-1]


@pytest.mark.parametrize("overflow", ["split", "truncate"])
def test_long_lines_are_split_or_truncated_and_counted(overflow):
    files = FakeFiles()
    files.create("/l/a.log", b"short\n" + b"x" * 25 + b"\nnext\n" + b"y" * 23)
    shipper, producer, clock = make(files, once=True, max_line_bytes=10, overflow=overflow)
    while shipper.turn():
        pass
    if overflow == "split":
        assert producer.values() == [b"short", b"x" * 10, b"x" * 10, b"x" * 5, b"next",
                                     b"y" * 10, b"y" * 10, b"y" * 3]
        assert shipper.tailer.lines_split == 2
    else:
        assert producer.values() == [b"short", b"x" * 10, b"next", b"y" * 10]
        assert shipper.tailer.lines_truncated == 2


def test_truncated_line_spanning_reads_is_skipped_to_its_newline():
    data = b"a" * 50 + b"\nafter\n"
    first = cut(data[:20], 0, 10, "truncate")
    assert first.lines == [b"a" * 10] and first.skipping and first.consumed == 20
    rest = cut(data[20:], 20, 10, "truncate", skipping=True)
    assert rest.lines == [b"after"] and rest.positions == [51] and not rest.skipping


def test_parse_json_keeps_fields_counts_bad_lines_and_ships_them_raw():
    files = FakeFiles()
    good = b'{"service": "billing", "level": "ERROR", "msg": "x"}'
    files.create("/l/api.log", good + b"\nnot json\n[1, 2]\n")
    shipper, producer, clock = make(files, once=True, parse="json", key="{host}/{service}")
    while shipper.turn():
        pass
    assert producer.values() == [good, b"not json", b"[1, 2]"]
    assert [k for _, _, k, _ in producer.sent] == [b"h/billing", b"h/api", b"h/api"]
    assert ["error.message" in h for _, _, _, h in producer.sent] == [False, True, True]
    assert shipper.parse_errors == 2
    assert producer.partitions_sent == [None] * 3  # keys differ: the producer hashes each


def test_a_read_goes_out_in_one_bulk_send_on_the_partition_of_its_key():
    files = FakeFiles()
    files.create("/l/a.log", lines(40))
    files.create("/l/b.log", lines(40, "b"))
    shipper, producer, clock = make(files, once=True, read_bytes=1 << 20)
    while shipper.turn():
        pass
    assert producer.calls == {"send": 0, "send_batch": 2}
    for path, prefix in ((b"/l/a.log", "line"), (b"/l/b.log", "b")):
        mine = [(value, key, h["log.offset"], partition) for (_, value, key, h), partition
                in zip(producer.sent, producer.partitions_sent) if h["log.file.path"] == path]
        assert mine == [(b"%s %d" % (prefix.encode(), i), path, b"%d" % len(lines(i, prefix)),
                         partition_for_key(path, 3)) for i in range(40)]


def test_a_custom_partitioner_gets_each_record():
    files = FakeFiles()
    files.create("/l/a.log", lines(10))
    shipper, producer, clock = make(files, once=True, partition_by_key=False)
    while shipper.turn():
        pass
    assert producer.calls["send_batch"] == 0
    assert producer.values() == lines(10).split(b"\n")[:-1]
    assert producer.partitions_sent == [None] * 10
    assert [h["log.offset"] for _, _, _, h in producer.sent] == [
        b"%d" % len(lines(i)) for i in range(10)]


def test_from_end_skips_what_was_there_at_start_but_reads_new_files_whole():
    files = FakeFiles()
    files.create("/l/old.log", lines(5))
    shipper, producer, clock = make(files, from_end=True)
    turns(shipper, clock, 1)
    files.append("/l/old.log", lines(1, "appended"))
    files.create("/l/new.log", lines(2, "new"))
    turns(shipper, clock, 1)
    assert sorted(producer.values()) == sorted(
        (lines(1, "appended") + lines(2, "new")).split(b"\n")[:-1])


def test_key_template_fields_and_errors():
    template = KeyTemplate("{host}:{service}:{file}", r"/(?P<service>[a-z]+)-\d+\.log", host="h")
    assert template.file_key("/var/log/pay-3.log") == b"h:pay:/var/log/pay-3.log"
    assert KeyTemplate("{service}", host="h").file_key("/x/api.log.2") == b"api"
    assert KeyTemplate("", host="h").file_key("/x/a.log") is None
    with pytest.raises(ValueError, match=r"unknown field \{pid\}"):
        KeyTemplate("{pid}")
    with pytest.raises(ValueError, match="no group named 'service'"):
        KeyTemplate("{service}", r"/(\w+)\.log")


def test_checkpoint_is_atomic_and_a_damaged_one_is_refused(tmp_path):
    path = str(tmp_path / "ckpt")
    entry = checkpoint.Entry("1:2:ab", 1, 2, "ab", 10, "/l/a.log", 42)
    checkpoint.store(path, [entry])
    assert checkpoint.load(path) == {"1:2:ab": entry}
    assert os.listdir(tmp_path) == ["ckpt"]
    raw = bytearray(open(path, "rb").read())
    raw[-5] ^= 0x01
    open(path, "wb").write(raw)
    with pytest.raises(checkpoint.CheckpointError, match="damaged: stored CRC"):
        checkpoint.load(path)
    assert checkpoint.load(str(tmp_path / "none")) == {}


@pytest.mark.parametrize("scan_between", [False, True])
def test_copytruncate_copy_matching_the_glob_is_read_on_not_read_twice(scan_between):
    files = FakeFiles()
    files.create("/l/app.log", lines(20))
    shipper, producer, clock = make(files)
    turns(shipper, clock, 1)
    files.append("/l/app.log", lines(5, "unread"))  # written, not read before the copy
    files.copy("/l/app.log", "/l/app.log.1")
    if scan_between:  # a scan sees the copy before the truncation: it waits
        shipper.tailer.scan()
    files.truncate("/l/app.log")
    files.append("/l/app.log", lines(3, "after"))
    turns(shipper, clock, 4)
    expected = (lines(20) + lines(5, "unread") + lines(3, "after")).split(b"\n")[:-1]
    assert producer.values() == expected
    assert {k for _, _, k, _ in producer.sent} == {b"/l/app.log"}


def test_a_copy_never_truncated_is_a_file_of_its_own():
    files = FakeFiles()
    files.create("/l/app.log", lines(4))
    shipper, producer, clock = make(files)
    turns(shipper, clock, 1)
    files.copy("/l/app.log", "/l/backup.log")
    turns(shipper, clock, 3)
    assert producer.values() == lines(4).split(b"\n")[:-1] * 2


def test_copytruncate_while_the_shipper_was_down_goes_on_in_the_copy(tmp_path):
    path = str(tmp_path / "ckpt")
    files = FakeFiles()
    files.create("/l/app.log", lines(20))
    shipper, producer, clock = make(files, checkpoint_path=path)
    turns(shipper, clock, 1)
    files.append("/l/app.log", lines(5, "unread"))  # the shipper is down from here
    files.copy("/l/app.log", "/l/app.log.1")
    files.truncate("/l/app.log")
    files.append("/l/app.log", lines(3, "after"))
    again, producer2, clock2 = make(files, checkpoint_path=path,
                                    restored=checkpoint.load(path))
    turns(again, clock2, 4)
    assert producer2.values() == (lines(5, "unread") + lines(3, "after")).split(b"\n")[:-1]
