"""Crash recovery: random corruption, torn writes, index rebuilds, checkpoints."""
from __future__ import annotations

import logging
import os
import random

import pytest
from crc32c import crc32c

from segments.checkpoint import CheckpointFile, OffsetCheckpoint
from segments.errors import KafkaStorageError
from segments.log import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
)
from segments.record import batch_descriptor as d
from tests.segments.helpers import (
    all_records,
    crash,
    file_batches,
    open_log,
    set_recovery_point,
    simple_batch,
)
from tests.support.clock import T0

CONFIG = {"segment.bytes": 5000, "index.interval.bytes": 300}


def build(path, seed, batches=70):
    """A log of several segments with batches of varied sizes; returns its record offsets."""
    rng = random.Random(seed)
    log = open_log(path, **CONFIG)
    for _ in range(batches):
        log.append(simple_batch(rng.randint(1, 6), value_size=rng.randint(5, 80)))
    assert len(log.segments) >= 3
    return log


def batches_in_order(path):
    """``(log_path, position, header)`` of every batch, in offset order."""
    out = []
    for name in sorted(n for n in os.listdir(path) if n.endswith(".log")):
        log_path = os.path.join(path, name)
        out.extend((log_path, position, header) for position, header in file_batches(log_path))
    return out


def flip(path, position, mask):
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ mask]))


def covered_byte(rng, size):
    """A byte of a batch that framing or the CRC covers (all but baseOffset and
    partitionLeaderEpoch, which sit outside the CRC)."""
    return rng.choice(list(range(d.BATCH_LENGTH_OFFSET, d.PARTITION_LEADER_EPOCH_OFFSET))
                      + list(range(d.MAGIC_OFFSET, size)))


def expect_truncated_at(path, batches, victim, caplog):
    """Open the log and check it ends right before batch ``victim``."""
    first_bad = batches[victim][2]
    expected_dropped = sum(h.size_in_bytes for _, _, h in batches[victim:])
    with caplog.at_level(logging.WARNING, logger="segments"):
        log = open_log(path, **CONFIG)
    assert log.log_end_offset == first_bad.base_offset
    assert log.recovery.bytes_dropped == expected_dropped
    assert f"dropped {expected_dropped} bytes" in caplog.text
    assert [r.offset for r in all_records(log)] == list(range(first_bad.base_offset))
    assert log.append(simple_batch(2)) == (first_bad.base_offset, first_bad.base_offset + 1)
    log.close()


@pytest.mark.parametrize("seed", range(10))
def test_a_flipped_byte_truncates_exactly_at_the_first_bad_batch(tmp_path, seed, caplog):
    rng = random.Random(seed)
    path = tmp_path / "t-0"
    crash(build(path, seed))
    set_recovery_point(path, 0)  # nothing is known to be flushed: validate everything
    batches = batches_in_order(path)
    victims = sorted(rng.sample(range(len(batches)), rng.choice((1, 2))))
    for victim in victims:
        log_path, position, header = batches[victim]
        flip(log_path, position + covered_byte(rng, header.size_in_bytes),
             rng.randint(1, 255))
    expect_truncated_at(path, batches, victims[0], caplog)


@pytest.mark.parametrize("seed", range(6))
def test_a_file_cut_inside_a_batch_truncates_there(tmp_path, seed, caplog):
    rng = random.Random(100 + seed)
    path = tmp_path / "t-0"
    crash(build(path, seed))
    set_recovery_point(path, 0)
    batches = batches_in_order(path)
    victim = rng.randrange(len(batches))
    log_path, position, header = batches[victim]
    cut = position + rng.randrange(1, header.size_in_bytes)
    os.truncate(log_path, cut)
    first_bad = header
    # recovery drops the torn batch's remaining bytes and every later segment
    expected = (cut - position) + sum(h.size_in_bytes for lp, _, h in batches if lp > log_path)
    log = open_log(path, **CONFIG)
    assert log.log_end_offset == first_bad.base_offset
    assert log.recovery.bytes_dropped == expected
    assert [r.offset for r in all_records(log)] == list(range(first_bad.base_offset))
    log.close()


def test_a_base_offset_that_goes_backwards_is_caught(tmp_path, caplog):
    path = tmp_path / "t-0"
    crash(build(path, 1))
    set_recovery_point(path, 0)
    batches = batches_in_order(path)
    log_path, position, header = batches[-3]
    with open(log_path, "r+b") as f:  # baseOffset is outside the CRC
        f.seek(position)
        f.write(d.INT64.pack(header.base_offset - 1))
    expect_truncated_at(path, batches, len(batches) - 3, caplog)


def test_a_base_offset_that_runs_into_the_next_segment_is_caught(tmp_path, caplog):
    path = tmp_path / "t-0"
    crash(build(path, 2))
    set_recovery_point(path, 0)
    batches = batches_in_order(path)
    # the last batch of the first segment, renumbered past the next segment's base offset
    victim = max(i for i, (lp, _, _) in enumerate(batches) if lp == batches[0][0])
    log_path, position, header = batches[victim]
    with open(log_path, "r+b") as f:
        f.seek(position)
        f.write(d.INT64.pack(header.base_offset + 8))
    expect_truncated_at(path, batches, victim, caplog)
    assert "reaches the next segment's base offset" in caplog.text


@pytest.mark.parametrize("shift", [-1, -3, 0])
def test_a_read_through_renumbered_offsets_fails_naming_the_file(tmp_path, shift):
    """A baseOffset flipped under a running log is met by the read path, which checks
    that offsets increase batch by batch as it walks the headers."""
    path = tmp_path / "t-0"
    log = build(path, 3)
    batches = batches_in_order(path)
    first_segment = [b for b in batches if b[0] == batches[0][0]]
    log_path, position, header = first_segment[3]
    previous = first_segment[2][2]
    with open(log_path, "r+b") as f:
        f.seek(position)
        f.write(d.INT64.pack(previous.last_offset + shift))
    with pytest.raises(KafkaStorageError) as e:  # the scan from an index entry crosses it
        log.read(header.base_offset, 1 << 20)
    assert os.path.basename(log_path) in str(e.value)
    assert f"baseOffset {previous.last_offset + shift}" in str(e.value)
    assert log.read(first_segment[1][2].base_offset, 1) != b""  # before it: served
    log.close()


def test_recovery_starts_at_the_recovery_point(tmp_path):
    path = tmp_path / "t-0"
    config = {"index.interval.bytes": 300}
    log = open_log(path, **config)
    for n in range(70):
        log.append(simple_batch(1 + n % 5, value_size=40))
    log.flush()
    flushed = log.log_end_offset
    for _ in range(5):
        log.append(simple_batch(3))
    crash(log)
    batches = batches_in_order(path)
    assert len({lp for lp, _, _ in batches}) == 1  # one segment: recovery resumes inside it
    # corrupt the first batch (below the recovery point) and one above it
    above = next(i for i, (_, _, h) in enumerate(batches) if h.base_offset > flushed)
    for victim in (0, above):
        log_path, position, header = batches[victim]
        flip(log_path, position + header.size_in_bytes - 1, 0x55)
    log = open_log(path, **config)
    assert not log.recovery.clean_shutdown
    assert log.recovery.recovery_point == flushed
    assert log.recovery.segments_recovered == 1
    # batches below the recovery point are trusted, not re-read; the one above is cut
    assert log.log_end_offset == batches[above][2].base_offset
    log.close()


def test_resumed_recovery_rebuilds_the_same_indexes_as_a_full_one(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path, **{"index.interval.bytes": 200})
    rng = random.Random(5)
    for n in range(80):
        log.append(simple_batch(rng.randint(1, 5), value_size=rng.randint(5, 60)))
        if n == 40:
            log.flush()
    crash(log)  # entries made after the flush were only in memory
    log = open_log(path, **{"index.interval.bytes": 200})
    log.close()
    resumed = {n: (path / n).read_bytes() for n in os.listdir(path) if "index" in n}
    os.unlink(path / CLEAN_SHUTDOWN_MARKER)
    set_recovery_point(path, 0)
    log = open_log(path, **{"index.interval.bytes": 200})
    assert log.recovery.segments_recovered == 1
    log.close()
    full = {n: (path / n).read_bytes() for n in os.listdir(path) if "index" in n}
    assert resumed == full
    assert len(full["00000000000000000000.index"]) > 8 * 10


def test_clean_shutdown_skips_validation(tmp_path):
    path = tmp_path / "t-0"
    log = build(path, 3)
    end = log.log_end_offset
    log.close()
    batches = batches_in_order(path)
    log_path, position, header = batches[-1]
    flip(log_path, position + header.size_in_bytes - 1, 0x01)
    log = open_log(path, **CONFIG)
    assert log.recovery.clean_shutdown and log.recovery.segments_recovered == 0
    assert log.log_end_offset == end
    assert not (path / CLEAN_SHUTDOWN_MARKER).exists()  # a crash from now on is unclean
    log.close()


def test_a_torn_batch_after_a_clean_shutdown_is_recovered_not_trusted(tmp_path):
    path = tmp_path / "t-0"
    log = build(path, 4)
    end, size = log.log_end_offset, log.size_in_bytes
    log.close()
    log_path, position, header = batches_in_order(path)[-1]
    with open(log_path, "rb") as f:
        f.seek(position)
        whole = f.read(header.size_in_bytes)
    with open(log_path, "ab") as f:  # half a batch written after the marker
        f.write(whole[: len(whole) // 2])
    log = open_log(path, **CONFIG)
    assert not log.recovery.clean_shutdown
    assert log.recovery.bytes_dropped == len(whole) // 2
    assert (log.log_end_offset, log.size_in_bytes) == (end, size)
    log.close()


@pytest.mark.parametrize("damage", ["delete", "partial-entry", "backwards", "past-the-log"])
@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_a_bad_index_is_rebuilt(tmp_path, damage, suffix):
    path = tmp_path / "t-0"
    log = build(path, 4)
    expected = {o: log.read(o, 400) for o in range(0, log.log_end_offset, 2)}
    stamps = {t: log.offset_for_timestamp(t) for t in range(0, 200, 7)}
    log.close()
    victim = path / ("00000000000000000000" + suffix)
    original = victim.read_bytes()
    assert len(original) >= 24
    entry = 8 if suffix == ".index" else 12
    if damage == "delete":
        victim.unlink()
    elif damage == "partial-entry":
        victim.write_bytes(original + b"\x01\x02")
    elif damage == "backwards":
        victim.write_bytes(original + original[:entry])
    else:
        last = bytearray(original[-entry:])
        if suffix == ".index":
            d.INT32.pack_into(last, 4, 10 ** 9)  # a position beyond the log
            d.INT32.pack_into(last, 0, 10 ** 6)
        else:
            d.INT32.pack_into(last, 8, -5)  # a negative relative offset
        victim.write_bytes(original[:-entry] + bytes(last))
    log = open_log(path, **CONFIG)
    assert log.recovery.indexes_rebuilt == 1
    assert log.recovery.bytes_dropped == 0
    assert {o: log.read(o, 400) for o in expected} == expected
    assert {t: log.offset_for_timestamp(t) for t in stamps} == stamps
    log.close()
    assert victim.read_bytes() == original


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_seeded_flips_in_an_index_never_break_reads(tmp_path, suffix, caplog):
    """A single-byte flip anywhere in the first, a middle or the last entry of a sealed or
    the active segment's index: the log opens, and reads by offset and by time return
    what they did before (the index rebuilt, or its bad entry not used)."""
    path = tmp_path / "t-0"
    log = open_log(path, **CONFIG)
    rng = random.Random(7)
    for n in range(70):
        log.append(simple_batch(rng.randint(1, 6), timestamp=T0 + 10 * n + rng.randint(0, 15),
                                value_size=rng.randint(5, 80)))
    offsets = range(0, log.log_end_offset, 3)
    times = range(T0 - 5, T0 + 10 * 70 + 30, 7)

    def reads(log):
        return ({o: log.read(o, 400) for o in offsets},
                {t: log.lookup_timestamp(t) for t in times})
    expected = reads(log)
    log.close()
    entry = 8 if suffix == ".index" else 12
    segments = sorted(n for n in os.listdir(path) if n.endswith(suffix))
    for name in (segments[0], segments[-1]):  # a sealed segment and the active one
        victim = path / name
        original = victim.read_bytes()
        count = len(original) // entry
        assert count >= 3
        for n in sorted({0, count // 2, count - 1}):
            for byte in range(entry):
                flipped = bytearray(original)
                flipped[n * entry + byte] ^= rng.randint(1, 255)
                victim.write_bytes(flipped)
                with caplog.at_level(logging.WARNING, logger="segments"):
                    log = open_log(path, **CONFIG)
                    assert reads(log) == expected, (name, n, byte)
                assert log.recovery.bytes_dropped == 0
                log.close()
                victim.write_bytes(original)
        assert name in caplog.text  # the warnings name the file


@pytest.mark.parametrize("seed", range(6))
def test_an_index_of_random_bytes_is_rebuilt_or_harmless(tmp_path, seed):
    """Whatever bytes an index holds before its last two entries (which the old O(1)
    check looked at), opening the log and reading by offset and by time never fails (no
    struct.error) and returns what it did before."""
    rng = random.Random(seed)
    path = tmp_path / "t-0"
    log = build(path, seed)
    offsets = range(0, log.log_end_offset, 2)
    expected = {o: log.read(o, 400) for o in offsets}
    stamps = {t: log.offset_for_timestamp(t) for t in range(T0 - 3, T0 + 10)}
    log.close()
    garbled = 0
    for suffix in (".index", ".timeindex"):
        tail = 2 * (8 if suffix == ".index" else 12)
        for name in sorted(n for n in os.listdir(path) if n.endswith(suffix)):
            original = (path / name).read_bytes()
            if len(original) > tail:
                garbled += 1
                (path / name).write_bytes(rng.randbytes(len(original) - tail)
                                          + original[-tail:])
    assert garbled >= 2
    log = open_log(path, **CONFIG)
    assert {o: log.read(o, 400) for o in offsets} == expected
    assert {t: log.offset_for_timestamp(t) for t in stamps} == stamps
    assert log.recovery.bytes_dropped == 0
    log.close()


def test_an_unreadable_recovery_checkpoint_means_full_validation(tmp_path):
    path = tmp_path / "t-0"
    log = build(path, 6)
    end = log.log_end_offset
    log.close()
    (path / RECOVERY_POINT_CHECKPOINT).write_text("0\n5\nt-0 12\n")
    log = open_log(path, **CONFIG)
    assert not log.recovery.clean_shutdown
    assert log.recovery.segments_recovered == len(log.segments)
    assert log.log_end_offset == end
    log.close()


def test_leftover_index_without_log_is_removed(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path)
    log.append(simple_batch(2))
    log.close()
    (path / "00000000000000000500.index").write_bytes(b"\x00" * 16)
    log = open_log(path)
    assert not (path / "00000000000000000500.index").exists()
    assert log.segment_base_offsets() == [0]
    log.close()


# -- checkpoint files -----------------------------------------------------------------------

def test_checkpoint_format_is_kafkas_plus_a_crc_line(tmp_path):
    checkpoint = OffsetCheckpoint(tmp_path / "recovery-point-offset-checkpoint")
    checkpoint.write({"t-1": 17, "t-0": 4242})
    body = b"0\n2\nt-0 4242\nt-1 17\n"
    assert (tmp_path / "recovery-point-offset-checkpoint").read_bytes() == \
        body + b"crc32c 0x%08x\n" % crc32c(body)
    assert checkpoint.read() == {"t-0": 4242, "t-1": 17}
    (tmp_path / "recovery-point-offset-checkpoint").write_bytes(body)  # Kafka's, no CRC
    assert checkpoint.read() == {"t-0": 4242, "t-1": 17}


@pytest.mark.slow  # exhaustive: every byte of the file, every one of its 255 flips
def test_every_single_byte_flip_in_a_checkpoint_is_caught(tmp_path):
    """Without the CRC line, a digit flipped into another digit read as another offset (a
    log start offset moved up hides acknowledged records)."""
    path = tmp_path / "log-start-offset-checkpoint"
    checkpoint = OffsetCheckpoint(path)
    checkpoint.write({"t-0": 120})
    original = path.read_bytes()
    for position in range(len(original)):
        for xor in range(1, 256):
            data = bytearray(original)
            data[position] ^= xor
            path.write_bytes(data)
            with pytest.raises(KafkaStorageError, match=f"checkpoint {path} line"):
                checkpoint.read()
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()
    assert OffsetCheckpoint(tmp_path / "missing").read() == {}


def test_checkpoint_is_replaced_atomically(tmp_path, monkeypatch):
    checkpoint = OffsetCheckpoint(tmp_path / "cp")
    checkpoint.write({"t-0": 1})

    def crash_before_rename(src, dst):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(os, "replace", crash_before_rename)
    with pytest.raises(OSError):
        checkpoint.write({"t-0": 2})
    monkeypatch.undo()
    assert checkpoint.read() == {"t-0": 1}  # the old file, whole
    checkpoint.write({"t-0": 3})  # a stale .tmp does not get in the way
    assert checkpoint.read() == {"t-0": 3}


@pytest.mark.parametrize("text, words", [
    ("1\n0\n", ["version '1'", "expected 0"]),
    ("0\n2\nt-0 1\n", ["count line '2'", "1 entry"]),
    ("0\n1\nt-0  1\n", ["line 3", "'t-0  1'"]),
    ("0\n", ["count line"]),
])
def test_malformed_checkpoint_names_what_is_wrong(tmp_path, text, words):
    (tmp_path / "cp").write_text(text)
    with pytest.raises(KafkaStorageError) as e:
        CheckpointFile(tmp_path / "cp").read()
    for word in words:
        assert word in str(e.value)


def test_checkpoint_offset_must_be_an_integer(tmp_path):
    (tmp_path / "cp").write_text("0\n1\nt-0 x1\n")
    with pytest.raises(KafkaStorageError, match="'x1'"):
        OffsetCheckpoint(tmp_path / "cp").read()


@pytest.mark.parametrize("data, words", [
    (b"0\n1\nt-0 4\xb22\n", ["line 3", "byte 0xb2 at position 9 is not ASCII"]),
    (b"0\n1\nt-0 4_2\n", ["line 3", "offset '4_2'"]),  # int() read it as 42
    (b"0\n1\nt-0 +42\n", ["line 3", "offset '+42'"]),
    (b"0\n1\nt-0 -1\n", ["line 3", "offset '-1'"]),
    (b"0\n1\nt-0 042\n", ["line 3", "offset '042'"]),
    (b"0\n01\nt-0 42\n", ["line 2", "count line '01'"]),
    (b"0\n2\nt-0 42\nt-0 7\n", ["line 4", "a second entry for 't-0'"]),
])
def test_a_damaged_offset_checkpoint_names_the_file_and_line(tmp_path, data, words):
    (tmp_path / "cp").write_bytes(data)
    with pytest.raises(KafkaStorageError) as e:
        OffsetCheckpoint(tmp_path / "cp").read()
    assert f"checkpoint {tmp_path / 'cp'} " in str(e.value)
    for word in words:
        assert word in str(e.value)


def test_a_damaged_log_start_checkpoint_hides_no_record(tmp_path, caplog):
    """Unreadable, or past the log end (a flipped digit): the first segment's base offset
    is the log start offset, so every record stays readable and nothing is deleted."""
    path = tmp_path / "t-0"
    log = build(path, 7)
    expected = all_records(log)
    log.close()
    for text in ("0\n1\nt-0 9\xff\n", "0\n1\nt-0 90000\n"):
        (path / LOG_START_OFFSET_CHECKPOINT).write_bytes(text.encode("latin-1"))
        with caplog.at_level(logging.WARNING, logger="segments.log"):
            log = open_log(path, **CONFIG)
        assert log.log_start_offset == 0
        assert all_records(log) == expected
        assert str(path / LOG_START_OFFSET_CHECKPOINT) in caplog.text
        log.close()
