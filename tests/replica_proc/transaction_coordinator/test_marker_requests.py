"""WriteTxnMarkers v1 built from the coordinator's markers, through the frames codec, and
its response read back into the per-partition codes ``markers_done`` takes."""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.errors import NotLeaderForPartitionError, RequestTimedOutError
from cluster.protocol import frames
from cluster.protocol.frames import ApiKey
from replica_proc.transaction_coordinator.marker_requests import (
    VERSION,
    failed,
    marker_errors,
    markers_request,
)
from replica_proc.transaction_coordinator.results import TxnMarker
from replica_proc.transaction_coordinator.states import TransactionState as S
from tests.replica_proc.transaction_coordinator.env import Env

COMMIT = TxnMarker("t", 1000, 3, 7, True, (("a", 0), ("a", 2), ("b", 1)))
ABORT = TxnMarker("u", 1001, 0, 7, False, (("c", 0),))


def test_the_request_carries_each_marker_grouped_by_topic():
    frame = frames.encode_request(markers_request([COMMIT, ABORT]), 5, "broker-1")
    header, request = frames.decode_request(frame)
    assert (header.request_api_key, header.request_api_version) == (
        ApiKey.WRITE_TXN_MARKERS, VERSION) == (27, 1)
    assert [(m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch,
             [(t.name, list(t.partition_indexes)) for t in m.topics])
            for m in request.markers] == [
        (1000, 3, True, 7, [("a", [0, 2]), ("b", [1])]),
        (1001, 0, False, 7, [("c", [0])])]


def response(entries):
    classes = frames.response_module(ApiKey.WRITE_TXN_MARKERS, VERSION)
    return classes.WriteTxnMarkersResponse(markers=tuple(
        classes.WritableTxnMarkerResult(producer_id=pid, topics=tuple(
            classes.WritableTxnMarkerTopicResult(name=topic, partitions=tuple(
                classes.WritableTxnMarkerPartitionResult(partition_index=p,
                                                         error_code=ErrorCode(code))
                for p, code in parts)) for topic, parts in topics))
        for pid, topics in entries))


def test_the_response_gives_every_partition_a_code():
    answer = response([(1000, [("a", [(0, 0), (2, 6)])]), (1001, [("c", [(0, 0)])])])
    frame = frames.encode_response(answer, 5)
    _, decoded = frames.decode_response(frame, ApiKey.WRITE_TXN_MARKERS, VERSION)
    assert marker_errors([COMMIT, ABORT], decoded) == [
        (COMMIT, {("a", 0): 0, ("a", 2): NotLeaderForPartitionError.errno,
                  ("b", 1): RequestTimedOutError.errno}),  # left out: sent again
        (ABORT, {("c", 0): 0})]
    assert failed([ABORT], 6) == [(ABORT, {("c", 0): 6})]


def test_a_round_trip_through_the_codec_completes_a_transaction():
    env = Env()
    producer = env.ongoing("t", [("a", 0), ("b", 1)])
    env.end("t", producer)
    (marker,) = env.markers
    env.markers = []
    frames.decode_request(frames.encode_request(markers_request([marker]), 1, "b"))
    answer = response([(marker.producer_id, [("a", [(0, 0)]), ("b", [(1, 0)])])])
    for sent, codes in marker_errors([marker], answer):
        env.run(env.coordinator.markers_done(sent, codes))
    assert env.state("t") is S.COMPLETE_COMMIT
