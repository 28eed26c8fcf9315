"""The transaction index (.txnindex): entries as Kafka lays them out, appended for ABORT
markers, searched for a fetched range, carried by truncation, retention, roll and
compaction, and rebuilt from the batches when it does not parse or a crash may have
left it wrong — never at the cost of a record."""
from __future__ import annotations

import os

import pytest

from segments import txn_index_descriptor as d
from segments.index import CorruptIndexError
from segments.record.control_record import ABORT, COMMIT
from segments.txn_index import AbortedTxn, TransactionIndex, encode_entry, parse_entries
from segments.txn_index_rebuild import rebuild_txn_indexes
from tests.segments.helpers import all_records, crash, end_txn, open_log, txn_batch


def test_entry_layout_is_kafkas():
    # version i16, producerId i64, firstOffset i64, lastOffset i64, lastStableOffset i64
    entry = encode_entry(AbortedTxn(0x0102030405060708, 10, 20, 11))
    assert len(entry) == d.ENTRY_SIZE == 34
    assert entry[:2] == b"\x00\x00"
    assert entry[2:10] == bytes(range(1, 9))
    assert int.from_bytes(entry[10:18], "big") == 10
    assert int.from_bytes(entry[18:26], "big") == 20
    assert int.from_bytes(entry[26:34], "big") == 11


def test_round_trip_and_rules(tmp_path):
    index = TransactionIndex(tmp_path / "00000000000000000100.txnindex", 100)
    assert index.entries() == [] and not index.file_exists
    txns = [AbortedTxn(7, 95, 101, 102), AbortedTxn(8, 100, 110, 104)]
    for txn in txns:
        index.append(txn)
    index.flush()
    assert os.path.getsize(index.path) == 2 * 34
    assert TransactionIndex(index.path, 100).entries() == txns
    with pytest.raises(ValueError, match="must increase"):
        index.append(AbortedTxn(9, 105, 110, 111))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(9, 105, 99, 100))  # before the segment
    index.truncate_to(110)
    assert TransactionIndex(index.path, 100).entries() == txns[:1]
    index.truncate_to(101)
    assert not index.file_exists and index.entries() == []


def test_collect_stops_at_the_lso(tmp_path):
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    t1, t2, t3 = AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 3, 10, 11), AbortedTxn(3, 12, 20, 21)
    for txn in (t1, t2, t3):
        index.append(txn)
    # t1's LSO 3 says a transaction begun at 3 was open: the search goes on past it
    assert index.collect(0, 4) == ([t1, t2], True)
    assert index.collect(6, 12) == ([t2], True)  # t3's LSO 21 ends the search
    assert index.collect(11, 30) == ([t3], False)  # the next segment may hold more


@pytest.mark.parametrize("damage, rule", [
    (lambda data: data[:-3], "whole number"),
    (lambda data: b"\x00\x05" + data[2:], "version 5"),
    (lambda data: data[:2] + b"\xff" * 8 + data[10:], "producer id -1"),
    (lambda data: data[34:] + data[:34], "not greater"),
    (lambda data: data[:18] + (5).to_bytes(8, "big") + data[26:], "below the segment"),
])
def test_strict_parse(damage, rule):
    data = encode_entry(AbortedTxn(1, 10, 12, 13)) + encode_entry(AbortedTxn(2, 11, 15, 16))
    assert len(parse_entries(data, 10)) == 2
    with pytest.raises(CorruptIndexError, match=rule):
        parse_entries(damage(data), 10)


def _interleaved(log):
    """Append open, committed and aborted transactions of four producers, ending them as
    a coordinator does (the log indexes the aborts); return the expected AbortedTxns."""
    first1, _ = log.append(txn_batch(1, 3))                     # 0-2   P1
    log.append(txn_batch(2, 2))                                 # 3-4   P2
    log.append(txn_batch(1, 2, base_sequence=3))                # 5-6   P1
    abort1 = end_txn(log, ABORT, 1)                             # 7
    txn1 = AbortedTxn(1, first1, abort1, 3)  # P2's open transaction holds the LSO at 3
    end_txn(log, COMMIT, 2)                                     # 8     P2 commits
    log.roll()
    first3, _ = log.append(txn_batch(3, 2))                     # 9-10  P3
    abort3 = end_txn(log, ABORT, 3)                             # 11
    txn3 = AbortedTxn(3, first3, abort3, abort3 + 1)
    log.append(txn_batch(4, 1))                                 # 12    P4 stays open
    return [txn1, txn3]


def test_log_collects_across_segments(tmp_path):
    log = open_log(tmp_path / "t-0")
    txn1, txn3 = _interleaved(log)
    assert log.collect_aborted_transactions(0, 13) == [txn1, txn3]
    assert log.collect_aborted_transactions(8, 13) == [txn3]
    assert log.collect_aborted_transactions(0, 3) == [txn1]  # LSO 3 >= 3: stops there
    assert log.collect_aborted_transactions(12, 13) == []
    log.close()


def test_reopen_keeps_and_rebuild_reproduces(tmp_path):
    log = open_log(tmp_path / "t-0")
    expected = _interleaved(log)
    log.close()
    log = open_log(tmp_path / "t-0")
    assert [s.txn_index.entries() for s in log.segments] == [expected[:1], expected[1:]]
    assert rebuild_txn_indexes(log.segments, 0) == 2
    assert [s.txn_index.entries() for s in log.segments] == [expected[:1], expected[1:]]
    log.close()


@pytest.mark.parametrize("damage", [
    lambda data: data + b"\x00" * 5,
    lambda data: b"\x00\x01" + data[2:],
    lambda data: b"garbage",
])
def test_corrupt_index_is_rebuilt_on_open(tmp_path, damage):
    log = open_log(tmp_path / "t-0")
    expected = _interleaved(log)
    records = all_records(log)
    path = log.segments[0].txn_index.path
    log.close()
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(damage(data))
    log = open_log(tmp_path / "t-0")
    assert log.recovery.txn_indexes_rebuilt == 2
    assert log.collect_aborted_transactions(0, 13) == expected
    assert all_records(log) == records  # nothing of the log was touched
    log.close()


def test_unclean_shutdown_rebuilds_lost_entries(tmp_path):
    log = open_log(tmp_path / "t-0")
    expected = _interleaved(log)
    crash(log)
    os.unlink(log.segments[1].txn_index.path)  # its last write never reached the disk
    log = open_log(tmp_path / "t-0")
    assert log.collect_aborted_transactions(0, 13) == expected
    log.close()


def test_truncation_and_retention_carry_the_index(tmp_path):
    log = open_log(tmp_path / "t-0", **{"retention.bytes": 0})
    txn1, txn3 = _interleaved(log)
    second = log.segments[1].txn_index.path
    log.truncate_to(11)  # the second ABORT marker goes
    assert log.collect_aborted_transactions(0, 11) == [txn1]
    assert not os.path.exists(second)
    log.roll()
    first = log.segments[0].txn_index.path
    assert log.delete_old_segments() == 2
    assert not os.path.exists(first)
    assert log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset) == []
    log.close()


def test_leftover_index_without_log_is_removed(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.close()
    stray = tmp_path / "t-0" / "00000000000000000500.txnindex"
    stray.write_bytes(encode_entry(AbortedTxn(1, 500, 501, 502)))
    open_log(tmp_path / "t-0").close()
    assert not stray.exists()


def test_append_aborted_txn_checks_the_marker_is_in_the_active_segment(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(txn_batch(1, 2))
    log.roll()
    log.append(txn_batch(2, 1))
    with pytest.raises(ValueError):
        log.append_aborted_txn(AbortedTxn(1, 0, 1, 2))  # offset 1 is in the old segment
    with pytest.raises(ValueError):
        log.append_aborted_txn(AbortedTxn(2, 2, 3, 4))  # past the log end
    log.close()


def test_a_follower_indexes_the_same_aborts(tmp_path):
    leader = open_log(tmp_path / "leader-0")
    expected = _interleaved(leader)
    follower = open_log(tmp_path / "follower-0")
    offset = 0
    while offset < leader.log_end_offset:
        found = leader.read_slice(offset, 1 << 20)
        follower.append_as_follower(found.tobytes())
        offset = follower.log_end_offset
    assert follower.collect_aborted_transactions(0, offset) == expected
    leader.close()
    follower.close()


@pytest.mark.parametrize("segment", [0, 1])
def test_a_flipped_byte_that_parses_is_caught_at_first_use(tmp_path, segment):
    """Each flip (two bits of every byte) of an index that keeps the strict parse's rules (another
    producer id, first offset, LSO) is found at the first collect and the index rewritten
    from the batches: read_committed readers get exactly the aborted transactions."""
    log = open_log(tmp_path / "t-0")
    expected = _interleaved(log)
    records = all_records(log)
    path = log.segments[segment].txn_index.path
    log.close()
    with open(path, "rb") as f:
        original = f.read()
    parsed_wrong = 0
    for position in range(len(original)):
        for bit in (0, 5):
            damaged = bytearray(original)
            damaged[position] ^= 1 << bit
            with open(path, "wb") as f:
                f.write(damaged)
            log = open_log(tmp_path / "t-0")
            if log.recovery.txn_indexes_rebuilt == 0:
                parsed_wrong += log.segments[segment].txn_index.entries() != \
                    expected[segment:segment + 1]
            assert log.collect_aborted_transactions(0, 13) == expected, (position, bit)
            assert log.collect_aborted_transactions(8, 13) == [expected[1]], (position, bit)
            assert all_records(log) == records
            log.close()
            with open(path, "rb") as f:
                assert f.read() == original, (position, bit)  # rewritten from the batches
    assert parsed_wrong  # the open's strict parse alone lets some through


def test_the_check_follows_rolls_and_truncation(tmp_path):
    """The state carried between checks stays right across a roll and a truncation."""
    log = open_log(tmp_path / "t-0")
    expected = _interleaved(log)
    log.close()
    log = open_log(tmp_path / "t-0")
    assert log.collect_aborted_transactions(0, 3) == expected[:1]  # checks segment 0
    log.roll()
    first5, _ = log.append(txn_batch(5, 2))
    abort5 = end_txn(log, ABORT, 5)
    txn5 = AbortedTxn(5, first5, abort5, 12)  # P4's transaction is still open at 12
    assert log.collect_aborted_transactions(0, abort5 + 1) == [*expected, txn5]
    log.truncate_to(abort5)
    assert log.collect_aborted_transactions(0, abort5) == expected
    log.close()
