"""WriteTxnMarkers between the transaction coordinator and the partition leaders: the
request that carries ``results.TxnMarker``s to one leader, and the per-partition error
codes of its response, as ``TransactionCoordinator.markers_done`` takes them.

WriteTxnMarkers travels at version 1 (``cluster.protocol.frames.FLEXIBLE_ONLY``: kio has
no v0; v1 is v0 made flexible, same fields). A leader answers every partition of every
marker; a partition left out of the response is reported as REQUEST_TIMED_OUT, so the
coordinator sends that marker again (Kafka raises on a response without a producer id;
here the marker is retried instead).

Pure functions: any thread.
"""
from __future__ import annotations

import itertools

from cluster.errors import RequestTimedOutError
from cluster.protocol import frames
from cluster.protocol.frames import ApiKey

VERSION = frames.SUPPORTED_VERSIONS[ApiKey.WRITE_TXN_MARKERS][1]


def markers_request(markers):
    """The WriteTxnMarkersRequest carrying ``markers`` (TxnMarkers for one leader)."""
    classes = frames.request_module(ApiKey.WRITE_TXN_MARKERS, VERSION)
    entries = []
    for marker in markers:
        topics = tuple(
            classes.WritableTxnMarkerTopic(name=topic,
                                           partition_indexes=tuple(p for _, p in group))
            for topic, group in itertools.groupby(marker.partitions, key=lambda tp: tp[0]))
        entries.append(classes.WritableTxnMarker(
            producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
            transaction_result=marker.committed, topics=topics,
            coordinator_epoch=marker.coordinator_epoch))
    return classes.WriteTxnMarkersRequest(markers=tuple(entries))


def marker_errors(markers, response):
    """[(marker, {(topic, partition): error code})] of ``response`` to the request of
    ``markers``: one entry per marker, every partition present (module doc)."""
    answered = {}
    for result in response.markers:
        codes = answered.setdefault(result.producer_id, {})
        for topic in result.topics:
            for partition in topic.partitions:
                codes[(topic.name, partition.partition_index)] = int(partition.error_code)
    return [(marker, {tp: answered.get(marker.producer_id, {}).get(
        tp, RequestTimedOutError.errno) for tp in marker.partitions}) for marker in markers]


def failed(markers, code):
    """[(marker, {partition: code})] for markers whose request failed as a whole (the
    leader went away: NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT ...), to retry them."""
    return [(marker, dict.fromkeys(marker.partitions, code)) for marker in markers]
