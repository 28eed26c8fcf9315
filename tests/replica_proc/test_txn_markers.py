"""The log side of transactions on a real broker process: WriteTxnMarkers appends COMMIT
and ABORT markers as the leader (errors per partition as Kafka's), the last stable offset
stops at the oldest open transaction and moves when it completes, a read_committed Fetch
reads below it and carries the aborted transactions of what it returns, ListOffsets
answers it as latest for read_committed, and read_uncommitted is unchanged.

The transactions are written as a transactional producer would (batches with a producer
id, epoch and sequence, attribute bit 4) through Produce, and ended through
WriteTxnMarkers as the transaction coordinator would: the test is the coordinator.
"""
from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode

from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.responses import build
from segments.record.batch_header import iter_batches
from segments.record.control_record import ABORT, COMMIT, read_control_record
from segments.record.records import RecordBatchBuilder, iter_records
from tests.support.broker import (
    BrokerEnv,
    batch,
    fetch_request,
    produce_request,
)

pytestmark = pytest.mark.multiprocess

TOPIC = "txn"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with BrokerEnv.started(tmp_path_factory.mktemp("broker")) as env:
        yield env


def txn_records(producer_id, values, epoch=0, sequence=0):
    """A transactional batch stamped now (the markers are: the segment does not roll on
    time between them)."""
    builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=epoch,
                                 base_sequence=sequence, is_transactional=True)
    for value in values:
        assert builder.append(None, None, value) is not None
    return bytes(builder.build())


def markers_request(markers):
    """``markers``: (producer id, epoch, commit?, coordinator epoch, [(topic, [index])])."""
    m = protocol.request_module(ApiKey.WRITE_TXN_MARKERS, 1)
    return m.WriteTxnMarkersRequest(markers=tuple(
        m.WritableTxnMarker(producer_id=pid, producer_epoch=epoch, transaction_result=commit,
                            coordinator_epoch=coordinator_epoch, topics=tuple(
                                m.WritableTxnMarkerTopic(name=name, partition_indexes=tuple(ps))
                                for name, ps in topics))
        for pid, epoch, commit, coordinator_epoch, topics in markers))


def marker_codes(response):
    return [[(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
             for t in marker.topics] for marker in response.markers]


def isolated_fetch_request(topic, offset, read_committed, max_wait_ms=0):
    request = fetch_request([(topic, 0, offset)], max_wait_ms=max_wait_ms)
    return build(type(request), **{
        f: getattr(request, f) for f in request.__dataclass_fields__ if not f.startswith("__")
        and f != "isolation_level"}, isolation_level=1 if read_committed else 0)


def fetch(client, topic, offset, read_committed):
    response = client.call(isolated_fetch_request(topic, offset, read_committed))
    return response.responses[0].partitions[0]


def latest(client, topic, read_committed):
    m = protocol.request_module(ApiKey.LIST_OFFSETS, 5)
    response = client.call(build(m.ListOffsetsRequest, replica_id=-1,
                                 isolation_level=1 if read_committed else 0, topics=(
                                     m.ListOffsetsTopic(name=topic, partitions=(
                                         m.ListOffsetsPartition(partition_index=0,
                                                                timestamp=-1),)),)))
    partition = response.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    return partition.offset


def produce(client, topic, records):
    partition = client.call(produce_request(topic, 0, records)).responses[0].partition_responses[0]
    assert partition.error_code == ErrorCode.none, partition
    return partition.base_offset


def test_markers_lso_and_read_committed(env):
    env.publish(**{TOPIC: (1, {})})
    client = env.client()
    first1 = produce(client, TOPIC, txn_records(1, [b"p1-a", b"p1-b"]))          # 0-1
    produce(client, TOPIC, txn_records(2, [b"p2-a"]))                            # 2
    produce(client, TOPIC, batch([b"plain"], timestamp=int(time.time() * 1000)))  # 3
    produce(client, TOPIC, txn_records(1, [b"p1-c"], sequence=2))                # 4
    # nothing is stable yet: P1's transaction began at 0
    assert latest(client, TOPIC, True) == 0
    assert latest(client, TOPIC, False) == 5
    uncommitted = fetch(client, TOPIC, 0, False)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (5, 0)
    assert uncommitted.aborted_transactions is None
    assert len(list(iter_records(uncommitted.records))) == 5
    committed = fetch(client, TOPIC, 0, True)
    assert committed.last_stable_offset == 0 and not committed.records

    # the coordinator aborts P1's transaction and commits P2's in one request
    response = client.call(markers_request([
        (1, 0, False, 3, [(TOPIC, [0])]), (2, 0, True, 3, [(TOPIC, [0])])]))
    assert marker_codes(response) == [[(TOPIC, [(0, 0)])], [(TOPIC, [(0, 0)])]]
    produce(client, TOPIC, txn_records(3, [b"p3-open"]))                         # 7
    assert latest(client, TOPIC, True) == 7  # P3's open transaction holds it
    committed = fetch(client, TOPIC, 0, True)
    assert committed.last_stable_offset == 7 and committed.high_watermark == 8
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] \
        == [(1, first1)]
    headers = list(iter_batches(committed.records))
    assert headers[-1].last_offset == 6  # nothing at or past the LSO
    markers = [(h.base_offset, h.producer_id, read_control_record(committed.records, h))
               for h in headers if h.is_control_batch]
    assert [(o, pid, r.control_type, r.coordinator_epoch) for o, pid, r in markers] \
        == [(5, 1, ABORT, 3), (6, 2, COMMIT, 3)]

    # a fetch past the aborted transaction gets no aborted transaction
    assert list(fetch(client, TOPIC, 6, True).aborted_transactions) == []
    # P3 commits: the LSO moves to the high watermark
    response = client.call(markers_request([(3, 0, True, 3, [(TOPIC, [0])])]))
    assert marker_codes(response) == [[(TOPIC, [(0, 0)])]]
    assert latest(client, TOPIC, True) == latest(client, TOPIC, False) == 9
    assert fetch(client, TOPIC, 7, True).last_stable_offset == 9


def test_marker_errors_per_partition(env):
    topic = "txn-errors"
    env.publish(**{topic: (1, {})})
    client = env.client()
    produce(client, topic, txn_records(11, [b"x"], epoch=5))
    response = client.call(markers_request([
        (11, 4, False, 1, [(topic, [0, 7]), ("no-such-topic", [0])]),   # an older epoch
    ]))
    assert marker_codes(response) == [[
        (topic, [(0, ErrorCode.invalid_producer_epoch),
                 (7, ErrorCode.unknown_topic_or_partition)]),
        ("no-such-topic", [(0, ErrorCode.unknown_topic_or_partition)])]]
    assert marker_codes(client.call(markers_request([(11, 5, False, 2, [(topic, [0])])]))) \
        == [[(topic, [(0, 0)])]]
    # a zombie coordinator (an older coordinator epoch) is fenced
    produce(client, topic, txn_records(11, [b"y"], epoch=5, sequence=1))
    assert marker_codes(client.call(markers_request([(11, 5, True, 1, [(topic, [0])])]))) \
        == [[(topic, [(0, ErrorCode.transaction_coordinator_fenced)])]]
    assert latest(client, topic, True) == 2  # the second transaction is still open


def data_values(records):
    """The values of the data records (not the markers) in fetched ``records``."""
    return [r.value for h in iter_batches(records) if not h.is_control_batch
            for r in iter_records(records, h.position, h.position + h.size_in_bytes)]


def test_a_parked_read_committed_fetch_waits_for_the_last_stable_offset(env):
    """Kafka's DelayedFetch with FetchIsolation.TXN_COMMITTED: records appended after an
    open transaction move the high watermark, not the LSO, so they leave a parked
    read_committed fetch parked; the marker that ends the transaction wakes it."""
    topic = "txn-parked"
    env.publish(**{topic: (1, {})})
    client, consumer, uncommitted = env.client(), env.client(), env.client()
    produce(client, topic, txn_records(21, [b"open"]))                            # 0
    consumer.send(isolated_fetch_request(topic, 0, True, max_wait_ms=600_000))
    uncommitted.send(isolated_fetch_request(topic, 1, False, max_wait_ms=600_000))
    assert consumer.receive(timeout=0.2) is None  # parked: nothing below the LSO
    produce(client, topic, batch([b"after"], timestamp=int(time.time() * 1000)))  # 1
    # the read_uncommitted fetch wakes on the high watermark...
    woken = uncommitted.receive()
    assert woken is not None
    assert data_values(woken[1].responses[0].partitions[0].records) == [b"after"]
    # ... the read_committed one stays parked: the LSO is still 0
    assert consumer.receive(timeout=0.2) is None
    assert latest(client, topic, True) == 0
    response = client.call(markers_request([(21, 0, True, 1, [(topic, [0])])]))  # 2
    assert marker_codes(response) == [[(topic, [(0, 0)])]]
    received = consumer.receive()
    assert received is not None, "the marker did not wake the read_committed fetch"
    partition = received[1].responses[0].partitions[0]
    assert partition.last_stable_offset == 3
    assert data_values(partition.records) == [b"open", b"after"]


def test_a_parked_read_committed_fetch_answers_empty_at_max_wait(env):
    topic = "txn-max-wait"
    env.publish(**{topic: (1, {})})
    client = env.client()
    produce(client, topic, txn_records(22, [b"open"]))
    produce(client, topic, batch([b"after"], timestamp=int(time.time() * 1000)))
    response = client.call(isolated_fetch_request(topic, 0, True, max_wait_ms=100))
    partition = response.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.none and not partition.records
    assert (partition.high_watermark, partition.last_stable_offset) == (2, 0)
