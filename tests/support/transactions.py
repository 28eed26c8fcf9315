"""Transactions written into a real cluster as a transactional producer and its coordinator
would write them: batches with a producer id, epoch, sequence and the transactional bit
through Produce, ended by COMMIT and ABORT markers through WriteTxnMarkers — for the
read_committed tests of the consumer and the Spark source (the transactional producer and
the coordinator are other pieces of issue 15)."""
from __future__ import annotations

from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from segments.record.records import RecordBatchBuilder
from tests.support.broker import Client, produce_request

#: What ``write_interleaved`` writes, in offset order: (value, producer id or None for a
#: plain record, visible to read_committed). P1 aborts, P2 and P3 commit, P4 stays open,
#: so the plain record after P4's first batch is past the last stable offset.
INTERLEAVED = [
    (b"p1-a0", 1, False), (b"p1-a1", 1, False), (b"p2-c0", 2, True), (b"plain-0", None, True),
    (b"p1-a2", 1, False), ("ABORT", 1, None), ("COMMIT", 2, None), (b"p3-c0", 3, True),
    ("COMMIT", 3, None), (b"p4-open", 4, False), (b"plain-after", None, False),
]


def _batch(producer_id, value, sequence):
    builder = RecordBatchBuilder(producer_id=-1 if producer_id is None else producer_id,
                                 producer_epoch=-1 if producer_id is None else 0,
                                 base_sequence=-1 if producer_id is None else sequence,
                                 is_transactional=producer_id is not None)
    assert builder.append(None, None, value) is not None  # now: markers are stamped now too
    return bytes(builder.build())


def write_interleaved(cluster_id, broker_id, topic, partition=0):
    """Write ``INTERLEAVED`` to ``topic``-``partition``, led by ``broker_id``; return the
    offsets of its entries."""
    client = Client(cluster_id, broker_id)
    m = protocol.request_module(ApiKey.WRITE_TXN_MARKERS, 1)
    sequences = {}
    offsets = []
    try:
        for value, producer_id, _ in INTERLEAVED:
            if isinstance(value, str):
                response = client.call(m.WriteTxnMarkersRequest(markers=(m.WritableTxnMarker(
                    producer_id=producer_id, producer_epoch=0,
                    transaction_result=value == "COMMIT", coordinator_epoch=0,
                    topics=(m.WritableTxnMarkerTopic(name=topic,
                                                     partition_indexes=(partition,)),)),)))
                code = response.markers[0].topics[0].partitions[0].error_code
                assert code == 0, f"{value} marker of producer {producer_id}: error {code}"
                offsets.append(None)
                continue
            sequence = sequences.get(producer_id, 0)
            sequences[producer_id] = sequence + 1
            answer = client.call(produce_request(topic, partition,
                                                 _batch(producer_id, value, sequence)))
            result = answer.responses[0].partition_responses[0]
            assert result.error_code == 0, result
            offsets.append(result.base_offset)
    finally:
        client.close()
    return offsets


def committed_values():
    """The values a read_committed reader sees, in order."""
    return [value for value, _, visible in INTERLEAVED if visible]


def data_values():
    """Every record value written (what read_uncommitted sees), in order."""
    return [value for value, _, _ in INTERLEAVED if isinstance(value, bytes)]
