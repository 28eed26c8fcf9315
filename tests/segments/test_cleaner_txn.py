"""Compaction of a log with transactions: aborted records go, committed ones are compacted
by key, an open transaction is never touched, markers go only after their delete horizon
(KIP-534), the transaction indexes stay right, and a crash mid-clean recovers."""
from __future__ import annotations

import os

import pytest

from segments.cleaner import clean
from segments.log import PartitionLog
from segments.record import batch_descriptor as d
from segments.record.control_record import ABORT, COMMIT, is_abort_marker
from segments.record.records import RecordBatchBuilder, iter_records
from segments.segment import SWAP_SUFFIX
from segments.txn_index import AbortedTxn
from segments.txn_index_rebuild import rebuild_txn_indexes
from tests.segments.helpers import batches_of, crash, end_txn, make_batch, open_log
from tests.support.clock import T0, FakeClock

COMPACT = {"cleanup.policy": "compact", "segment.bytes": 100_000,
           "delete.retention.ms": 60_000}
P1, P2, P3, P4 = 1001, 1002, 1003, 1004


def keyed_txn(producer_id, sequence, records, timestamp=T0):
    """A transactional batch of ``producer_id`` holding ``(key, value)`` records."""
    builder = RecordBatchBuilder(0, 1 << 20, producer_id=producer_id, producer_epoch=0,
                                 base_sequence=sequence, is_transactional=True)
    for key, value in records:
        assert builder.append(timestamp, key, value) is not None
    return bytes(builder.build())


def plain(*records):
    return make_batch([(T0, key, value) for key, value in records])


def interleaved_log(path, clock):
    """Plain records and committed, aborted and open transactions, over five segments
    (offsets in the comments; aborted values end in ``x``)."""
    log = open_log(path, clock, **COMPACT)
    log.append(plain((b"a", b"a0"), (b"b", b"b0")))                   # 0, 1
    log.append(keyed_txn(P1, 0, [(b"a", b"a1"), (b"c", b"c1")]))       # 2, 3
    log.append(keyed_txn(P2, 0, [(b"a", b"a2x"), (b"d", b"d2x")]))     # 4, 5
    end_txn(log, COMMIT, P1, timestamp=T0 + 6)                         # 6
    end_txn(log, ABORT, P2, timestamp=T0 + 7)                          # 7
    log.roll()
    log.append(plain((b"b", b"b8")))                                   # 8
    log.append(keyed_txn(P4, 0, [(b"b", b"b9")]))                      # 9
    end_txn(log, COMMIT, P4, timestamp=T0 + 10)                        # 10
    log.append(plain((b"b", b"b11")))                                  # 11
    log.roll()
    log.append(keyed_txn(P2, 2, [(b"f", b"f12")]))                     # 12
    end_txn(log, COMMIT, P2)                                           # 13
    log.append(keyed_txn(P4, 1, [(b"g", b"g14")]))                     # 14
    end_txn(log, COMMIT, P4)                                           # 15
    log.roll()
    log.append(keyed_txn(P3, 0, [(b"a", b"a16"), (b"e", b"e17")]))     # 16, 17: open
    log.append(plain((b"h", b"h18")))                                  # 18
    log.roll()
    log.append(plain((b"z", b"z19")))                                  # 19: active
    return log


def last_stable_offset(log):
    first = log.producer_state.first_undecided_offset()
    return log.log_end_offset if first is None else first


def read_uncommitted(log):
    """The data records of the whole log, as a read_uncommitted consumer gets them."""
    return _consume(log, log.log_end_offset, committed=False)


def read_committed(log):
    """What a read_committed consumer gets: up to the LSO, with the aborted transactions
    the log reports for each read dropped, as Kafka's consumer drops them."""
    return _consume(log, last_stable_offset(log), committed=True)


def _consume(log, upto, committed):
    out = []
    offset = log.log_start_offset
    while offset < upto:
        found = log.read_slice(offset, 1 << 20, upto)
        if not found.size:
            break
        aborted = []
        if committed:
            aborted = sorted(log.collect_aborted_transactions(
                offset, log.fetch_upper_bound(found, upto)), key=lambda t: t.first_offset)
        data = found.tobytes()
        aborting = set()
        for header in batches_of(data):
            while aborted and aborted[0].first_offset <= header.last_offset:
                aborting.add(aborted.pop(0).producer_id)
            if header.is_control_batch:
                if is_abort_marker(data, header):
                    aborting.discard(header.producer_id)
            elif not (header.is_transactional and header.producer_id in aborting):
                end = header.position + header.size_in_bytes
                out.extend((r.offset, r.value) for r in iter_records(data, header.position, end)
                           if r.offset >= offset)
            offset = header.next_offset
    return out


def control_batches(log):
    """``{offset: header}`` of the control batches in the log."""
    out = {}
    for segment in log.segments:
        with open(segment.log_path, "rb") as f:
            data = f.read()
        for header in batches_of(data):
            if header.is_control_batch:
                out[header.base_offset] = (header, data)
    return out


COMMITTED_BEFORE = [(0, b"a0"), (1, b"b0"), (2, b"a1"), (3, b"c1"), (8, b"b8"), (9, b"b9"),
                    (11, b"b11"), (12, b"f12"), (14, b"g14")]
COMMITTED_AFTER = [(2, b"a1"), (3, b"c1"), (11, b"b11"), (12, b"f12"), (14, b"g14")]
OPEN_AND_AFTER = [(16, b"a16"), (17, b"e17"), (18, b"h18"), (19, b"z19")]


def test_aborted_records_go_committed_ones_compact_and_the_open_transaction_stays(tmp_path):
    clock = FakeClock(T0 + 1000)
    log = interleaved_log(tmp_path / "t-0", clock)
    assert last_stable_offset(log) == 16
    assert read_committed(log) == COMMITTED_BEFORE
    open_bytes = [open(s.log_path, "rb").read() for s in log.segments[3:]]

    stats = clean(log, force=True)

    # the range stops at the segment holding the open transaction's first offset
    assert stats.end_offset == 16
    assert stats.aborted_records_removed == 2
    assert read_uncommitted(log) == COMMITTED_AFTER + OPEN_AND_AFTER
    assert read_committed(log) == COMMITTED_AFTER
    assert [open(s.log_path, "rb").read() for s in log.segments[-2:]] == open_bytes
    # every marker stays this pass: each one's transaction had batches in it
    assert sorted(control_batches(log)) == [6, 7, 10, 13, 15]
    # P2's aborted transaction still has a marker and was seen: its entry stays
    assert log.collect_aborted_transactions(0, 16) == [AbortedTxn(P2, 4, 7, 8)]

    # the open transaction is intact: the producer state still ends it
    end_txn(log, ABORT, P3)
    clean(log, force=True)
    assert read_uncommitted(log) == [(2, b"a1"), (3, b"c1"), (11, b"b11"), (12, b"f12"),
                                     (14, b"g14"), (18, b"h18"), (19, b"z19")]
    assert read_committed(log) == [(2, b"a1"), (3, b"c1"), (11, b"b11"), (12, b"f12"),
                                   (14, b"g14"), (18, b"h18"), (19, b"z19")]
    log.close()


def test_the_last_stable_offset_given_bounds_the_range(tmp_path):
    clock = FakeClock(T0 + 1000)
    log = interleaved_log(tmp_path / "t-0", clock)
    stats = clean(log, last_stable_offset=12, force=True)  # a marker not yet replicated
    assert stats.end_offset == 12
    assert read_uncommitted(log)[:4] == [(2, b"a1"), (3, b"c1"), (11, b"b11"), (12, b"f12")]
    log.close()


def test_markers_go_after_their_delete_horizon(tmp_path):
    clock = FakeClock(T0 + 1000)
    path = tmp_path / "t-0"
    log = interleaved_log(path, clock)
    clean(log, force=True)

    # Second pass: P2's aborted and P4's first committed batches are gone, so their
    # markers are stamped with a delete horizon (KIP-534) and stay; P1's stays as it is.
    clock.now = T0 + 5000
    stats = clean(log, force=True)
    assert stats.markers_stamped == 2 and stats.markers_removed == 0
    markers = control_batches(log)
    horizon = T0 + 5000 + 60_000
    for offset, timestamp in ((7, T0 + 7), (10, T0 + 10)):
        header, data = markers[offset]
        header.validate()
        assert header.attributes & d.DELETE_HORIZON_MASK
        assert header.base_timestamp == horizon
        record, = iter_records(data, header.position, header.position + header.size_in_bytes)
        assert record.timestamp == timestamp  # the record's own timestamp is unchanged
        assert header.max_timestamp == timestamp
    assert not markers[6][0].attributes & d.DELETE_HORIZON_MASK
    # nothing of P2's aborted transaction is left: neither is its index entry
    assert log.collect_aborted_transactions(0, 16) == []
    assert read_committed(log) == COMMITTED_AFTER

    clock.now = horizon - 1
    assert clean(log, force=True).markers_removed == 0
    assert sorted(control_batches(log)) == [6, 7, 10, 13, 15]
    clock.now = horizon
    stats = clean(log, force=True)
    assert stats.markers_removed == 2
    assert sorted(control_batches(log)) == [6, 13, 15]
    assert read_committed(log) == COMMITTED_AFTER
    assert read_uncommitted(log) == COMMITTED_AFTER + OPEN_AND_AFTER

    # reopened from its files (state rebuilt from the batches), the log agrees
    log.close()
    os.unlink(path / ".clean-shutdown")
    for name in os.listdir(path):
        if name.endswith(".snapshot"):
            os.unlink(path / name)
    log = PartitionLog(path, log.config, clock=clock)
    assert last_stable_offset(log) == 16
    assert read_committed(log) == COMMITTED_AFTER
    assert rebuild_txn_indexes(log.segments, 0) == 0
    end_txn(log, COMMIT, P3)
    assert read_committed(log)[-4:] == OPEN_AND_AFTER
    log.close()


def test_a_producers_last_batch_keeps_its_aborted_transaction_indexed(tmp_path):
    """P's last data batch is in an aborted transaction: its header stays (no records) for
    P's sequence, so the ABORT marker and the index entry stay with it."""
    clock = FakeClock(T0 + 1000)
    log = open_log(tmp_path / "t-0", clock, **COMPACT)
    log.append(plain((b"a", b"a0")))
    log.append(keyed_txn(P1, 0, [(b"a", b"a1x")]))
    end_txn(log, ABORT, P1)
    log.roll()
    log.append(plain((b"z", b"z3")))
    for now in (T0 + 2000, T0 + 100_000, T0 + 200_000):
        clock.now = now
        clean(log, force=True)
        assert read_uncommitted(log) == [(0, b"a0"), (3, b"z3")]
        assert read_committed(log) == [(0, b"a0"), (3, b"z3")]
        assert sorted(control_batches(log)) == [2]
        assert log.collect_aborted_transactions(0, 3) == [AbortedTxn(P1, 1, 2, 3)]
    header, = [h for h in batches_of(open(log.segments[0].log_path, "rb").read())
               if h.producer_id == P1 and not h.is_control_batch]
    assert (header.base_offset, header.record_count, header.base_sequence) == (1, 0, 0)

    # P1 writes again: the empty header goes, then (a pass later, past the horizon) the
    # marker, and with the header the index entry
    log.roll()
    log.append(keyed_txn(P1, 1, [(b"b", b"b4")]))
    end_txn(log, COMMIT, P1)
    log.roll()
    log.append(plain((b"z", b"z6")))
    clean(log, force=True)
    assert [h.base_offset for h in batches_of(open(log.segments[0].log_path, "rb").read())
            if h.producer_id == P1] == [2, 4, 5]
    assert log.collect_aborted_transactions(0, 6) == [AbortedTxn(P1, 1, 2, 3)]
    clean(log, force=True)
    assert log.collect_aborted_transactions(0, 6) == []
    clock.now += 60_000
    assert clean(log, force=True).markers_removed == 1
    assert sorted(control_batches(log)) == [5]
    assert read_committed(log) == [(0, b"a0"), (3, b"z3"), (4, b"b4"), (6, b"z6")]
    log.close()


def _crash_in_swap(step):
    """A replace_segments that stops as a killed process would at ``step``."""
    def replace(self, cleaned, old_segments):
        cleaned.seal()
        if step == "before-commit":
            raise SystemExit("crash")
        cleaned.rename_suffix(SWAP_SUFFIX)
        if step == "after-commit-torn-txnindex":
            with open(cleaned.txn_index.path, "r+b") as f:
                f.truncate(20)  # the swap's index torn as a failing disk would leave it
            raise SystemExit("crash")
        for segment in old_segments[1:]:
            segment.delete()
        old_segments[0].close()
        raise SystemExit("crash")
    return replace


@pytest.mark.parametrize("step", ["before-commit", "after-commit-torn-txnindex",
                                  "after-deleting-old"])
def test_a_crash_mid_clean_recovers(tmp_path, monkeypatch, step):
    clock = FakeClock(T0 + 1000)
    path = tmp_path / "t-0"
    log = interleaved_log(path, clock)
    log.flush()
    monkeypatch.setattr(PartitionLog, "replace_segments", _crash_in_swap(step))
    with pytest.raises(SystemExit):
        clean(log, force=True)
    monkeypatch.undo()
    crash(log)
    if step == "before-commit":  # the cleaner's cleanup did not run: a torn .cleaned
        torn = (path / "00000000000000000000.log").read_bytes()[:100]
        (path / "00000000000000000000.log.cleaned").write_bytes(torn)
        (path / "00000000000000000000.txnindex.cleaned").write_bytes(b"\x00" * 20)
    log = PartitionLog(path, log.config, clock=clock)
    assert not [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap"))]
    committed = read_committed(log)
    assert committed == (COMMITTED_BEFORE if step == "before-commit" else COMMITTED_AFTER)
    if step != "before-commit":
        assert not [value for _, value in read_uncommitted(log) if value.endswith(b"x")]
    # the indexes after recovery are what the batches say
    entries = [list(s.txn_index.entries()) for s in log.segments]
    rebuild_txn_indexes(log.segments, 0)
    assert [list(s.txn_index.entries()) for s in log.segments] == entries
    # and a later pass completes the job
    clean(log, force=True)
    assert read_committed(log) == COMMITTED_AFTER
    assert read_uncommitted(log) == COMMITTED_AFTER + OPEN_AND_AFTER
    end_txn(log, COMMIT, P3)
    log.close()
