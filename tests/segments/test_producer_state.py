"""The partition log's producer state (segments.producer_state): Kafka's sequence and epoch
rules for idempotent producers, transactions' bookkeeping, snapshots (round trip,
corruption, recovery), followers, truncation, retention and compaction."""
from __future__ import annotations

import logging
import os
import struct

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch

from segments import producer_snapshot_descriptor as sd
from segments.cleaner import clean
from segments.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    StorageError,
    TransactionCoordinatorFencedError,
)
from segments.log import DuplicateAppend
from segments.producer_state import (
    INT32_MAX,
    ORIGIN_COORDINATOR,
    BatchMetadata,
    CompletedTxn,
    decrement_sequence,
    increment_sequence,
)
from segments.record import batch_descriptor as d
from segments.record.control_record_descriptor import COMMIT
from segments.record.records import (
    RecordBatchBuilder,
)
from tests.segments.helpers import all_records, batches_of, crash, idempotent, marker, open_log
from tests.support.clock import T0

PID, OTHER = 1000, 2000


def summary(log):
    """Per producer what a snapshot keeps: epoch, last batch, coordinator epoch, open
    transaction, last timestamp; and the open transactions."""
    state = log.producer_state
    return ({pid: (e.producer_epoch, e.batches[-1] if e.batches else None,
                   e.coordinator_epoch, e.current_txn_first_offset, e.last_timestamp)
             for pid, e in state.producers.items()}, state.ongoing_transactions())


@pytest.fixture
def log(tmp_path):
    log = open_log(tmp_path / "t-0")
    yield log
    log.close()


def five_batches_of_two(log, producer_id=PID, epoch=0):
    """Sequences 0-1, 2-3, ... 10-11 (six batches) at offsets 0-1, 2-3, ..."""
    for n in range(6):
        assert log.append(idempotent(producer_id, epoch, 2 * n, 2)) == (2 * n, 2 * n + 1)


# -- sequences and epochs --------------------------------------------------------------------

@pytest.mark.parametrize("back", [1, 2, 3, 4, 5])
def test_a_retry_of_one_of_the_last_five_batches_returns_its_original_offsets(log, back):
    five_batches_of_two(log)
    n = 6 - back
    result = log.append(idempotent(PID, 0, 2 * n, 2))
    assert isinstance(result, DuplicateAppend)
    assert result == (2 * n, 2 * n + 1)
    assert result.max_timestamp == T0 + 1
    assert log.log_end_offset == 12  # nothing appended
    assert log.append(idempotent(PID, 0, 12, 1)) == (12, 12)  # and the next one follows


def test_a_retry_older_than_the_last_five_is_out_of_order(log):
    five_batches_of_two(log)
    with pytest.raises(OutOfOrderSequenceNumberError) as e:
        log.append(idempotent(PID, 0, 0, 2))
    assert e.value.errno == 45
    assert log.log_end_offset == 12


def test_a_retry_with_another_sequence_range_is_out_of_order(log):
    five_batches_of_two(log)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(idempotent(PID, 0, 10, 1))  # 10-10: the batch was 10-11


@pytest.mark.parametrize("sequence", [13, 20, 11, INT32_MAX])
def test_a_sequence_gap_is_out_of_order_and_appends_nothing(log, sequence):
    five_batches_of_two(log)
    with pytest.raises(OutOfOrderSequenceNumberError, match=f"{sequence} .incoming"):
        log.append(idempotent(PID, 0, sequence, 1))
    assert log.log_end_offset == 12
    assert log.producer_state.last_entry(PID).last_seq == 11


def test_sequences_wrap_at_int32_max_to_zero(log):
    assert log.append(idempotent(PID, 0, INT32_MAX - 1, 2)) == (0, 1)  # ends at INT32_MAX
    assert log.append(idempotent(PID, 0, 0, 1)) == (2, 2)
    assert log.append(idempotent(PID, 0, 1, 1)) == (3, 3)


def test_a_batch_across_the_wrap_ends_at_its_wrapped_sequence(log):
    assert log.append(idempotent(PID, 0, INT32_MAX - 1, 4)) == (0, 3)
    entry = log.producer_state.last_entry(PID)
    assert entry.batches[-1] == BatchMetadata(INT32_MAX - 1, 1, 0, 3, T0 + 3)
    assert log.append(idempotent(PID, 0, INT32_MAX - 1, 4)) == DuplicateAppend(0, 3, T0 + 3)
    assert log.append(idempotent(PID, 0, 2, 1)) == (4, 4)


def test_sequence_arithmetic_matches_kafkas():
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 2, 5) == 2
    assert increment_sequence(5, 3) == 8
    assert decrement_sequence(0, 1) == INT32_MAX
    assert decrement_sequence(2, 5) == INT32_MAX - 2
    assert decrement_sequence(8, 3) == 5


def test_a_new_epoch_starts_at_sequence_zero(log):
    five_batches_of_two(log)
    with pytest.raises(OutOfOrderSequenceNumberError, match="new epoch"):
        log.append(idempotent(PID, 1, 12, 1))
    assert log.append(idempotent(PID, 1, 0, 1)) == (12, 12)
    entry = log.producer_state.last_entry(PID)
    assert entry.producer_epoch == 1 and len(entry.batches) == 1
    # the old epoch's batches are no longer duplicates: they are fenced
    with pytest.raises(InvalidProducerEpochError) as e:
        log.append(idempotent(PID, 0, 10, 2))
    assert e.value.errno == 47


def test_an_older_epoch_is_refused(log):
    log.append(idempotent(PID, 3, 0, 1))
    with pytest.raises(InvalidProducerEpochError, match="smaller than the last seen epoch 3"):
        log.append(idempotent(PID, 2, 1, 1))
    assert log.log_end_offset == 1


def test_an_unknown_producer_is_accepted_at_any_sequence(log):
    """Current Kafka (KIP-360): no UNKNOWN_PRODUCER_ID from the broker; a producer whose
    state is gone (retention) continues where it was."""
    assert log.append(idempotent(PID, 4, 57, 2)) == (0, 1)
    assert log.append(idempotent(PID, 4, 59, 1)) == (2, 2)


def test_producers_are_independent(log):
    log.append(idempotent(PID, 0, 0, 1))
    log.append(idempotent(OTHER, 0, 0, 1))
    assert log.append(idempotent(PID, 0, 0, 1)) == DuplicateAppend(0, 0, T0)
    assert log.append(idempotent(OTHER, 0, 1, 1)) == (2, 2)


def test_plain_batches_leave_no_state(log):
    builder = RecordBatchBuilder(0, 1 << 20)
    builder.append(T0, b"k", b"v")
    assert log.append(bytes(builder.build())) == (0, 0)
    assert type(log.append(bytes(builder.build()))) is tuple  # no duplicate detection
    assert log.producer_state.producers == {}


def test_an_append_of_several_batches_is_checked_as_a_whole(log):
    log.append(idempotent(PID, 0, 0, 1))
    data = idempotent(PID, 0, 1, 2) + idempotent(PID, 0, 3, 1) + idempotent(PID, 0, 9, 1)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(data)
    assert log.log_end_offset == 1 and log.producer_state.last_entry(PID).last_seq == 0
    assert log.append(idempotent(PID, 0, 1, 2) + idempotent(PID, 0, 3, 1)) == (1, 3)
    assert log.producer_state.last_entry(PID).last_seq == 3


def test_a_client_batch_with_a_negative_sequence_is_an_invalid_record(log):
    with pytest.raises(InvalidRecordError, match="sequence number -1"):
        log.append(idempotent(PID, 0, -1, 1))


# -- transactions ----------------------------------------------------------------------------

def test_a_transaction_is_open_from_its_first_batch_to_its_marker(log):
    log.append(idempotent(OTHER, 0, 0, 1))
    log.append(idempotent(PID, 0, 0, 2, transactional=True))
    log.append(idempotent(PID, 0, 2, 1, transactional=True))
    state = log.producer_state
    assert state.ongoing_transactions() == {PID: 1}
    assert state.first_unstable_offset() == 1
    with pytest.raises(InvalidTxnStateError) as e:
        log.append(idempotent(PID, 0, 3, 1))
    assert e.value.errno == 48
    assert log.append(marker(PID, 0, commit=False, coordinator_epoch=5),
                      origin=ORIGIN_COORDINATOR) == (4, 4)
    assert state.ongoing_transactions() == {}
    assert state.first_unstable_offset() == 1  # the marker is not below the HW yet
    state.on_high_watermark_updated(4)
    assert state.first_unstable_offset() == 1
    state.on_high_watermark_updated(5)
    assert state.first_unstable_offset() is None
    entry = state.last_entry(PID)
    assert (entry.coordinator_epoch, entry.current_txn_first_offset) == (5, -1)


def test_complete_txn_returns_the_completed_transaction(log):
    log.append(idempotent(PID, 0, 0, 1, transactional=True))
    log.append(idempotent(OTHER, 0, 0, 1, transactional=True))
    state = log.producer_state
    completed = CompletedTxn(PID, 0, 2, False)
    assert state.last_stable_offset(completed) == 1  # OTHER's transaction is still open
    assert state.complete_txn(PID, 0, True, 2, 1) == completed
    assert state.ongoing_transactions() == {OTHER: 1}
    assert state.complete_txn(PID, 0, True, 3, 1) is None  # nothing open: empty txn
    assert state.last_stable_offset(CompletedTxn(OTHER, 1, 4, True)) == 5


def test_a_marker_with_an_old_producer_epoch_is_refused(log):
    log.append(idempotent(PID, 2, 0, 1, transactional=True))
    with pytest.raises(InvalidProducerEpochError):
        log.append(marker(PID, 1), origin=ORIGIN_COORDINATOR)
    with pytest.raises(InvalidProducerEpochError):
        log.producer_state.complete_txn(PID, 1, True, 1, 0)
    assert log.producer_state.ongoing_transactions() == {PID: 0}


def test_a_marker_from_an_older_coordinator_epoch_is_fenced(log):
    log.append(idempotent(PID, 0, 0, 1, transactional=True))
    log.append(marker(PID, 0, coordinator_epoch=7), origin=ORIGIN_COORDINATOR)
    log.append(idempotent(PID, 0, 1, 1, transactional=True))
    with pytest.raises(TransactionCoordinatorFencedError) as e:
        log.append(marker(PID, 0, coordinator_epoch=6), origin=ORIGIN_COORDINATOR)
    assert e.value.errno == 52
    assert log.producer_state.ongoing_transactions() == {PID: 2}


def test_clients_may_not_write_markers(log):
    with pytest.raises(InvalidRecordError, match="control"):
        log.append(marker(PID, 0))


def test_a_bumped_epoch_marker_then_data_from_sequence_zero(log):
    """InitProducerId after a timeout aborts with epoch + 1: the producer then starts at
    sequence 0 of that epoch."""
    log.append(idempotent(PID, 0, 0, 3, transactional=True))
    log.append(marker(PID, 1, commit=False), origin=ORIGIN_COORDINATOR)
    assert log.append(idempotent(PID, 1, 0, 1, transactional=True)) == (4, 4)


def test_idle_producers_expire_but_not_one_with_an_open_transaction(log):
    log.append(idempotent(PID, 0, 0, 1, timestamp=T0))
    log.append(idempotent(OTHER, 0, 0, 1, transactional=True, timestamp=T0))
    state = log.producer_state
    assert state.remove_expired_producers(T0 + 999, 1000) == 0
    assert state.remove_expired_producers(T0 + 1000, 1000) == 1
    assert set(state.producers) == {OTHER}
    # the forgotten producer is unknown again: any sequence goes
    assert log.append(idempotent(PID, 0, 17, 1)) == (2, 2)


# -- snapshots -------------------------------------------------------------------------------

def test_a_clean_close_writes_a_snapshot_in_kafkas_layout(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(idempotent(PID, 3, 0, 2, timestamp=T0))
    log.append(idempotent(OTHER, 1, 7, 1, transactional=True, timestamp=T0 + 10))
    log.close()
    path = tmp_path / "t-0" / "00000000000000000003.snapshot"
    data = path.read_bytes()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count, len(data)) == (1, 2, 10 + 2 * 46)
    assert crc == crc32c(data[6:])
    entries = [struct.unpack_from(">qhiqiqiq", data, 10 + 46 * n) for n in range(2)]
    assert entries == [(PID, 3, 1, 1, 1, T0 + 1, -1, -1),
                       (OTHER, 1, 7, 2, 0, T0 + 10, -1, 2)]


def test_a_snapshot_round_trips_through_close_and_open(tmp_path):
    log = open_log(tmp_path / "t-0")
    for n in range(4):
        log.append(idempotent(PID, 0, 3 * n, 3))
    log.append(idempotent(OTHER, 2, 0, 1, transactional=True))
    before = summary(log)
    log.close()
    log = open_log(tmp_path / "t-0")
    assert summary(log) == before
    assert log.producer_state.first_unstable_offset() == 12
    # the snapshot keeps the last batch: its retry is still a duplicate
    assert log.append(idempotent(PID, 0, 9, 3)) == DuplicateAppend(9, 11, T0 + 2)
    assert log.append(idempotent(PID, 0, 12, 1)) == (13, 13)
    log.close()


def test_a_damaged_snapshot_is_skipped_with_a_warning_and_the_state_rebuilt(tmp_path, caplog):
    path = tmp_path / "t-0"
    log = open_log(path, **{"segment.bytes": 400})
    for n in range(16):
        log.append(idempotent(PID, 0, n, 1))
    assert len(log.segments) > 2
    before = summary(log)
    log.close()
    latest = max(log.producer_state.snapshot_offsets())
    snapshot = path / sd.file_name(latest)
    data = bytearray(snapshot.read_bytes())
    data[20] ^= 0x01  # inside the first entry: the CRC no longer matches
    snapshot.write_bytes(data)
    with caplog.at_level(logging.WARNING, logger="segments.producer_state"):
        log = open_log(path)
    assert str(snapshot) in caplog.text and "CRC" in caplog.text
    assert not snapshot.exists()
    assert summary(log) == before
    assert log.append(idempotent(PID, 0, 16, 1)) == (16, 16)
    log.close()


def test_truncated_or_foreign_snapshot_bytes_fail_the_strict_parse():
    good = sd.encode([(PID, 0, 1, 5, 1, T0, -1, -1)])
    assert sd.decode(good) == [(PID, 0, 1, 5, 1, T0, -1, -1)]
    for bad in (good[:-1], good + b"\0", b"\x00\x02" + good[2:], b"\x00"):
        with pytest.raises(sd.CorruptSnapshotError) as e:
            sd.decode(bad)
        assert isinstance(e.value, StorageError)  # one storage tree, as CorruptIndexError


def test_an_unclean_stop_rebuilds_the_state_from_the_log(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path, **{"segment.bytes": 400})
    for n in range(10):
        log.append(idempotent(PID if n % 2 else OTHER, 0, n // 2, 1, transactional=n > 6))
    before = summary(log)
    crash(log)
    log = open_log(path)
    assert not log.recovery.clean_shutdown
    assert summary(log) == before
    assert log.append(idempotent(PID, 0, 4, 1, transactional=True)) == \
        DuplicateAppend(9, 9, T0)
    log.close()


def test_a_log_without_snapshots_rebuilds_its_state_at_open(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path, **{"segment.bytes": 400})
    for n in range(10):
        log.append(idempotent(PID, 0, n, 1))
    before = summary(log)
    log.close()
    for name in os.listdir(path):
        if name.endswith(sd.SUFFIX):
            os.unlink(path / name)
    log = open_log(path)
    assert summary(log) == before
    log.close()


def test_an_empty_log_closes_without_a_snapshot(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.close()
    assert [n for n in os.listdir(tmp_path / "t-0") if n.endswith(sd.SUFFIX)] == []


def test_each_roll_writes_a_snapshot_at_the_new_segments_base(tmp_path):
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 400})
    for n in range(10):
        log.append(idempotent(PID, 0, n, 1))
    assert log.producer_state.snapshot_offsets() == log.segment_base_offsets()[1:]
    log.close()


# -- followers, truncation, retention, compaction --------------------------------------------

def test_a_follower_builds_the_state_of_its_leader(tmp_path):
    leader = open_log(tmp_path / "leader-0")
    follower = open_log(tmp_path / "follower-0")
    leader.append(idempotent(PID, 0, 0, 2))
    leader.append(idempotent(OTHER, 1, 0, 1, transactional=True))
    leader.append(idempotent(PID, 0, 2, 3))
    leader.append(marker(OTHER, 1, coordinator_epoch=3), origin=ORIGIN_COORDINATOR)
    leader.append(idempotent(PID, 1, 0, 1))
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert follower.log_end_offset == leader.log_end_offset
    assert follower.producer_state.producers == leader.producer_state.producers
    assert follower.producer_state.ongoing_transactions() == {}
    leader.close()
    follower.close()


def test_a_follower_takes_what_its_leader_wrote_without_the_client_checks(log):
    """An old epoch after a newer one, with a sequence gap (what a leader of an older
    leader epoch may have taken): the follower appends it and takes its epoch and
    sequence, as Kafka's replication path does (a warning, no error)."""
    source = open_log(log.path + "-src")
    source.append(idempotent(PID, 2, 0, 1))
    data = bytearray(source.read(0, 1 << 20))
    source.close()
    second = idempotent(PID, 1, 5, 1)
    log.append_as_follower(bytes(data))
    d.INT64.pack_into(second_buf := bytearray(second), 0, 1)
    log.append_as_follower(bytes(second_buf))
    entry = log.producer_state.last_entry(PID)
    assert (entry.producer_epoch, entry.last_seq, log.log_end_offset) == (1, 5, 2)


def test_truncation_drops_later_snapshots_and_rebuilds_the_state(tmp_path):
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 400})
    states = {}
    for n in range(10):
        states[log.log_end_offset] = summary(log)
        log.append(idempotent(PID, 0, n, 1))
    log.truncate_to(4)
    assert all(offset <= 4 for offset in log.producer_state.snapshot_offsets())
    assert summary(log) == states[4]
    assert log.append(idempotent(PID, 0, 4, 1)) == (4, 4)
    log.truncate_to(0)
    assert log.producer_state.producers == {}
    log.close()


def test_truncate_fully_forgets_every_producer(log):
    log.append(idempotent(PID, 0, 0, 1))
    log.roll()
    log.truncate_fully_and_start_at(50)
    assert log.producer_state.producers == {}
    assert log.producer_state.snapshot_offsets() == []
    assert [n for n in os.listdir(log.path) if n.endswith(sd.SUFFIX)] == []


def test_retention_drops_snapshots_below_the_log_start_but_the_latest(tmp_path):
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 400})
    for n in range(10):
        log.append(idempotent(PID, 0, n, 1))
    bases = log.segment_base_offsets()
    log.delete_records_before(bases[-1])
    assert log.log_start_offset == bases[-1]
    assert log.producer_state.snapshot_offsets() == [bases[-1]]
    # the producer's state outlives its records
    assert log.append(idempotent(PID, 0, 10, 1)) == (10, 10)
    log.close()
    log = open_log(tmp_path / "t-0")
    assert log.producer_state.last_entry(PID).last_seq == 10
    log.close()


def test_compaction_keeps_each_producers_last_batch(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path, **{"cleanup.policy": "compact", "segment.bytes": 300})
    log.append(idempotent(PID, 0, 0, 1, key=b"a"))
    log.append(idempotent(OTHER, 0, 0, 1, key=b"a"))   # supersedes PID's only record
    log.append(idempotent(OTHER, 0, 1, 1, key=b"a"))   # supersedes OTHER's first
    for _ in range(6):
        log.append(idempotent(-1, -1, -1, 1, key=b"z"))
    before = summary(log)
    stats = clean(log, force=True)
    assert stats is not None and stats.records_retained < stats.records_read
    headers = [h for s in log.segments for h in batches_of(s.read_bytes(0, s.size))]
    kept = {(h.producer_id, h.base_offset, h.record_count) for h in headers
            if h.producer_id >= 0}
    assert kept == {(PID, 0, 0), (OTHER, 2, 1)}  # PID's last batch kept, emptied
    (emptied,) = [h for h in headers if h.producer_id == PID]
    reference = DefaultRecordBatch(bytearray(emptied.buf[emptied.position:
                                                         emptied.position
                                                         + emptied.size_in_bytes]))
    assert reference.validate_crc() and list(reference) == []
    assert (reference.base_sequence, reference.producer_epoch) == (0, 0)
    assert [r.offset for r in all_records(log) if r.key == b"a0"] == [2]
    log.close()
    for name in os.listdir(path):
        if name.endswith(sd.SUFFIX):
            os.unlink(path / name)
    log = open_log(path)
    assert summary(log) == before
    log.close()


# -- kafka-python reads what the state is built from -----------------------------------------

def test_kafka_python_reads_the_producer_fields_and_the_marker():
    batch = DefaultRecordBatch(bytearray(idempotent(PID, 7, 41, 3, transactional=True)))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (PID, 7, 41)
    assert batch.is_transactional and not batch.is_control_batch
    control = DefaultRecordBatch(bytearray(marker(PID, 7, commit=True, coordinator_epoch=9)))
    assert control.is_control_batch and control.is_transactional
    assert control.validate_crc()
    (record,) = list(control)
    assert struct.unpack(">hh", record.key) == (0, COMMIT)
    assert struct.unpack(">hi", record.value) == (0, 9)
