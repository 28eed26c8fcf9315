"""read_committed on the consumer side: PartitionRecords drops the batches of aborted
transactions by Kafka's algorithm (the aborted transactions of the fetched range, the
aborted producer set, the ABORT marker taking its producer out of it) and never hands out
a control batch, in either isolation level; the position moves past whatever it skips.
The bytes and the aborted transactions come from a real partition log, fetched whole or
a batch at a time."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from cluster.structs import TopicPartition
from consumer_proc.partition_records import PartitionRecords
from segments.record.control_record import ABORT, COMMIT
from tests.segments.helpers import end_txn, open_log, simple_batch, txn_batch

TP = TopicPartition("t", 0)


def _write(log):
    """Interleaved open, committed and aborted transactions; the committed values."""
    def marker(kind, pid, epoch=0):
        return end_txn(log, kind, pid, epoch)

    log.append(txn_batch(1, 3, value=b"p1-aborted"))                       # 0-2
    log.append(txn_batch(2, 2, value=b"p2-committed"))                     # 3-4
    log.append(txn_batch(1, 2, base_sequence=3, value=b"p1-aborted"))      # 5-6
    assert marker(ABORT, 1) == 7
    marker(COMMIT, 2)                                                      # 8
    log.append(simple_batch(2))                                            # 9-10 plain
    log.append(txn_batch(3, 2, value=b"p3-aborted"))                       # 11-12
    assert marker(ABORT, 3) == 13
    log.append(txn_batch(1, 2, producer_epoch=1, value=b"p1-committed"))   # 14-15
    marker(COMMIT, 1, epoch=1)                                             # 16
    return ([b"p2-committed-0", b"p2-committed-1", b"v" * 50, b"v" * 50,
             b"p1-committed-0", b"p1-committed-1"])


def _consume(log, read_committed, max_bytes):
    """Fetch from 0 to the log end ``max_bytes`` at a time, as a consumer with its
    position would; ``(values, offsets, final position)``."""
    position = 0
    values, offsets = [], []
    while position < log.log_end_offset:
        found = log.read_slice(position, max_bytes)
        aborted = None
        if read_committed:
            aborted = [SimpleNamespace(producer_id=t.producer_id, first_offset=t.first_offset)
                       for t in log.collect_aborted_transactions(
                           position, log.fetch_upper_bound(found))]
        part = PartitionRecords(TP, position, found.tobytes(), True, aborted)
        for record in part.take(1000):
            values.append(bytes(record.value))
            offsets.append(record.offset)
        assert not part
        position = part.next_offset
    return values, offsets, position


@pytest.mark.parametrize("max_bytes", [1 << 20, 1])
def test_read_committed_skips_aborted_and_markers(tmp_path, max_bytes):
    log = open_log(tmp_path / "t-0")
    committed = _write(log)
    values, offsets, position = _consume(log, True, max_bytes)
    assert values == committed
    assert offsets == [3, 4, 9, 10, 14, 15]
    assert position == log.log_end_offset == 17  # past the skipped batches and markers
    log.close()


@pytest.mark.parametrize("max_bytes", [1 << 20, 1])
def test_read_uncommitted_returns_every_data_record_but_no_marker(tmp_path, max_bytes):
    log = open_log(tmp_path / "t-0")
    _write(log)
    values, offsets, position = _consume(log, False, max_bytes)
    assert offsets == [0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 14, 15]
    assert position == 17
    log.close()


def test_columns_path_skips_the_same(tmp_path):
    log = open_log(tmp_path / "t-0")
    committed = _write(log)
    found = log.read_slice(0, 1 << 20)
    aborted = log.collect_aborted_transactions(0, log.fetch_upper_bound(found))
    part = PartitionRecords(TP, 0, found.tobytes(), True, aborted)
    columns = part.take_columns(1000)
    records = [r for c in columns for r in c.to_records("t", 0)]
    assert [bytes(r.value) for r in records] == committed
    assert part.next_offset == 17 and part.batch_count == 10
    log.close()


def test_a_fetch_of_aborted_batches_only_moves_the_position(tmp_path):
    log = open_log(tmp_path / "t-0")
    _write(log)
    found = log.read_slice(11, 1 << 20, max_offset=14)  # P3's batch and its ABORT marker
    aborted = log.collect_aborted_transactions(11, 14)
    part = PartitionRecords(TP, 11, found.tobytes(), True, aborted)
    assert part.take(100) == [] and part.next_offset == 14 and part.batch_count == 2
    log.close()
