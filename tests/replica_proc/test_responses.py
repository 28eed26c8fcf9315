"""The hand-packed answers of the hot paths write the bytes cluster.protocol.frames writes for the
same response: FetchResponseFrame (from log slices) at every Fetch version, the Produce
response at every Produce version."""
from __future__ import annotations

import datetime

import pytest

from cluster.protocol import frames as protocol
from cluster.protocol.fetch_response import FetchResponseFrame, PartitionData
from cluster.protocol.frames import ApiKey
from cluster.protocol.produce_response import PartitionResult, produce_response_frame
from replica_proc.responses import build, error
from segments.log import PartitionLog
from segments.txn_index import AbortedTxn
from tests.support.broker import batch


@pytest.fixture
def log_with_batches(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    for n in range(3):
        log.append(batch([b"value-%d-%d" % (n, i) for i in range(5)]))
    yield log
    log.close()


@pytest.mark.parametrize("version", range(4, 12))
@pytest.mark.parametrize("read_committed", [False, True])
def test_the_frame_matches_protocol_encode_response(log_with_batches, version, read_committed):
    log = log_with_batches
    first = log.read_slice(5, 1)  # the second batch
    everything = log.read_slice(0, 1 << 20)
    aborted = [AbortedTxn(1001, 3, 9, 4), AbortedTxn(7, 5, 12, 13)]
    topics = [("orders", [PartitionData(0, 0, 15, 15, 0, first, aborted),
                          PartitionData(3, 1, 15, 15, 0)]),  # OFFSET_OUT_OF_RANGE, no records
              ("payments", [PartitionData(1, 0, 15, 15, 0, everything)])]
    frame = FetchResponseFrame(version, 4242, topics, read_committed=read_committed)
    written = bytearray(frame.size)
    assert frame.write_into(memoryview(written)) == frame.size

    m = protocol.response_module(ApiKey.FETCH, version)

    def partition(index, code, records, txns=()):
        return build(m.PartitionData, partition_index=index, error_code=error(code),
                     high_watermark=15, last_stable_offset=15, log_start_offset=0,
                     aborted_transactions=tuple(
                         build(m.AbortedTransaction, producer_id=t.producer_id,
                               first_offset=t.first_offset) for t in txns)
                     if read_committed else None,
                     preferred_read_replica=-1, records=records)
    expected = build(m.FetchResponse, throttle_time=datetime.timedelta(0), error_code=error(0),
                     session_id=0, responses=(
                         build(m.FetchableTopicResponse, topic="orders", partitions=(
                             partition(0, 0, first.tobytes(), aborted),
                             partition(3, 1, b""))),
                         build(m.FetchableTopicResponse, topic="payments", partitions=(
                             partition(1, 0, everything.tobytes()),))))
    assert written == protocol.encode_response(expected, 4242)
    assert frame.tobytes() == written
    # Piece by piece (the fragments of a ring message), every cut: the same bytes.
    for piece in (1, 7, 64, 1000):
        pieced = bytearray(frame.size)
        for start in range(0, frame.size, piece):
            with memoryview(pieced) as view:
                frame.write_range_into(view[start:start + piece], start)
        assert pieced == written, piece


@pytest.mark.parametrize("version", range(4, 12))
@pytest.mark.parametrize("found", [True, False], ids=["records", "none"])
def test_the_one_partition_frame_matches_protocol_encode_response(log_with_batches, version,
                                                                   found):
    """One topic, one partition, read_uncommitted: the fixed bytes from the per-topic
    template (made, then reused), then the records."""
    records = log_with_batches.read_slice(5, 1) if found else None
    for correlation_id in (4242, 17):
        frame = FetchResponseFrame(version, correlation_id, [
            ("päyments", [PartitionData(2, 0 if found else 1, 15, 14, 3, records)])])
        written = bytearray(frame.size)
        assert frame.write_into(memoryview(written)) == frame.size
        m = protocol.response_module(ApiKey.FETCH, version)
        expected = build(
            m.FetchResponse, throttle_time=datetime.timedelta(0), error_code=error(0),
            session_id=0, responses=(build(m.FetchableTopicResponse, topic="päyments",
                                           partitions=(build(
                m.PartitionData, partition_index=2, error_code=error(0 if found else 1),
                high_watermark=15, last_stable_offset=14, log_start_offset=3,
                aborted_transactions=None, preferred_read_replica=-1,
                records=records.tobytes() if found else b""),)),))
        assert written == protocol.encode_response(expected, correlation_id)
        pieced = bytearray(frame.size)
        for start in range(0, frame.size, 7):
            with memoryview(pieced) as view:
                frame.write_range_into(view[start:start + 7], start)
        assert pieced == written


@pytest.mark.parametrize("version", range(3, 9))
@pytest.mark.parametrize("topics", [
    [("orders", [PartitionResult(0, 0, 1234, -1, 17, None),
                 PartitionResult(5, 10, -1, -1, -1, "batch too large: 2000 > 1000")]),
     ("päyments", [PartitionResult(2, 0, 99, 1_700_000_000_123, 0, None)])],
    # one partition: packed from the per-topic template (twice: made, then reused)
    [("päyments", [PartitionResult(2, 0, 99, 1_700_000_000_123, 0, None)])],
    [("päyments", [PartitionResult(3, 6, -1, -1, -1, None)])],
    [("orders", [PartitionResult(0, 10, -1, -1, -1, "batch too large: 2000 > 1000")])],
], ids=["two-topics", "one-partition", "one-partition-error", "one-partition-message"])
def test_the_produce_response_matches_protocol_encode_response(version, topics):
    written = produce_response_frame(version, 7, topics)

    m = protocol.response_module(ApiKey.PRODUCE, version)

    def partition(r):
        return build(m.PartitionProduceResponse, index=r.index, error_code=error(r.error_code),
                     base_offset=r.base_offset,
                     log_append_time=None if r.log_append_time < 0 else
                     datetime.datetime.fromtimestamp(r.log_append_time / 1000, datetime.UTC),
                     log_start_offset=r.log_start_offset, record_errors=(),
                     error_message=r.message)
    expected = build(m.ProduceResponse, throttle_time=datetime.timedelta(0), responses=tuple(
        build(m.TopicProduceResponse, name=name, partition_responses=tuple(map(partition, ps)))
        for name, ps in topics))
    assert written == protocol.encode_response(expected, 7)
