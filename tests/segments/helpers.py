"""Helpers of the partition-log tests (test_log*, test_recovery, test_cleaner,
test_producer_state): batches built from records (plain, idempotent, transaction markers),
a log opened on a fake clock, its records read back, a simulated crash."""
from __future__ import annotations

import os

from segments.checkpoint import OffsetCheckpoint
from segments.log import CLEAN_SHUTDOWN_MARKER, RECOVERY_POINT_CHECKPOINT, PartitionLog
from segments.log_config import LogConfig
from segments.producer_state import ORIGIN_COORDINATOR
from segments.record import batch_descriptor as d
from segments.record.batch_header import BatchHeader
from segments.record.control_record import ABORT, COMMIT, build_end_txn_marker
from segments.record.records import (
    RecordBatchBuilder,
    iter_records,
)
from tests.support.clock import T0, FakeClock


def make_batch(records, compression=0, batch_size=1 << 20):
    """A producer batch (baseOffset 0) of ``(timestamp, key, value)`` records."""
    builder = RecordBatchBuilder(compression, batch_size)
    for timestamp, key, value in records:
        assert builder.append(timestamp, key, value) is not None
    return bytes(builder.build())


def simple_batch(count, timestamp=T0, value_size=50, key_prefix=b"k"):
    return make_batch([(timestamp + i, key_prefix + b"%d" % i, b"v" * value_size)
                       for i in range(count)])


def open_log(path, clock=None, **props):
    return PartitionLog(path, LogConfig.from_dict(props), clock=clock or FakeClock(T0))


def records_of(data):
    return list(iter_records(data))


def all_records(log):
    """Every record of the log, read batch by batch from the log start offset."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        if not data:
            break
        batch_records = records_of(data)
        out.extend(r for r in batch_records if r.offset >= offset)
        last = None
        for header in batches_of(data):
            last = header
        offset = last.next_offset
    return out


def batches_of(data):
    position = 0
    while position < len(data):
        header = BatchHeader(data, position)
        yield header
        position += header.size_in_bytes


def crash(log):
    """Leave the log as a killed process would: files closed, no flush, no marker."""
    for segment in log.segments:
        if segment._fd is not None:
            os.close(segment._fd)
            segment._fd = None
        for index in (segment.offset_index, segment.time_index):
            index._release_mmap()
            index._close_fd()  # entries still in memory are lost, as in a crash
    marker = os.path.join(log.path, CLEAN_SHUTDOWN_MARKER)
    if os.path.exists(marker):
        os.unlink(marker)


def set_recovery_point(path, offset):
    name = os.path.basename(os.path.normpath(path))
    OffsetCheckpoint(os.path.join(path, RECOVERY_POINT_CHECKPOINT)).write({name: offset})


def file_batches(path):
    """``(position, BatchHeader)`` of each batch of a .log file (trusted bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    position = 0
    out = []
    while position + d.HEADER_SIZE <= len(data):
        header = BatchHeader(data, position)
        out.append((position, header))
        position += header.size_in_bytes
    return out


def txn_batch(producer_id, count, producer_epoch=0, base_sequence=0, timestamp=T0,
              value=b"t", transactional=True):
    """A batch of ``count`` records of ``producer_id``'s transaction (values
    ``value + b"-<n>"``)."""
    builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                                 base_sequence=base_sequence, is_transactional=transactional)
    for n in range(count):
        assert builder.append(timestamp + n, None, value + b"-%d" % n) is not None
    return bytes(builder.build())


def end_txn(log, control_type, producer_id, producer_epoch=0, coordinator_epoch=0,
            timestamp=T0):
    """Append ``producer_id``'s COMMIT or ABORT marker as the transaction coordinator
    does; return its offset."""
    marker = build_end_txn_marker(control_type, coordinator_epoch, producer_id,
                                  producer_epoch, timestamp)
    return log.append(marker, origin=ORIGIN_COORDINATOR)[0]


def idempotent(producer_id, epoch, sequence, count=1, transactional=False, key=b"k",
               timestamp=T0):
    """A producer batch of ``count`` records stamped with producer id, epoch, sequence."""
    builder = RecordBatchBuilder(0, 1 << 20, producer_id=producer_id, producer_epoch=epoch,
                                 base_sequence=sequence, is_transactional=transactional)
    for i in range(count):
        builder.append(timestamp + i, key + b"%d" % i, b"value")
    return bytes(builder.build())


def marker(producer_id, epoch, commit=True, coordinator_epoch=0, timestamp=T0):
    """A transaction marker: a transactional control batch holding one
    EndTransactionMarker record (Kafka's layout)."""
    return build_end_txn_marker(COMMIT if commit else ABORT, coordinator_epoch, producer_id,
                                epoch, timestamp)
