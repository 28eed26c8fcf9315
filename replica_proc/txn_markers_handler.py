"""WriteTxnMarkers v1: the transaction coordinator's COMMIT and ABORT markers, appended by
this broker as the leader of each partition a transaction wrote to.

For each marker of the request (a producer id and epoch, COMMIT or ABORT, the
coordinator's epoch, the partitions) and each of its partitions, in request order
(Kafka's KafkaApis.handleWriteTxnMarkersRequest):

- the partition must exist here (UNKNOWN_TOPIC_OR_PARTITION) and be led by this broker
  (NOT_LEADER_OR_FOLLOWER); its ISR must hold min.insync.replicas members
  (NOT_ENOUGH_REPLICAS): markers are appended with acks=all;
- the marker's control batch (``segments.record.control_record``) is appended through the
  partition's leader append as the coordinator's (``ORIGIN_COORDINATOR``): the producer
  state checks it — an epoch older than the producer's is INVALID_PRODUCER_EPOCH, a
  coordinator epoch older than the last one seen TRANSACTION_COORDINATOR_FENCED —
  and completes the producer's transaction, and an ABORT adds the aborted transaction
  to the segment's transaction index (``segments.log``); a failing disk is
  KAFKA_STORAGE_ERROR for that partition alone;
- the answer waits, as an acks=all Produce does, until the high watermark of every
  partition appended to has passed its marker (NOT_ENOUGH_REPLICAS_AFTER_APPEND if the
  ISR shrank below min.insync.replicas meanwhile, NOT_LEADER_OR_FOLLOWER if the
  partition moved, REQUEST_TIMED_OUT after ``REQUEST_TIMEOUT_MS``, Kafka's
  request.timeout.ms): at once for a partition without followers. The waiting uses its
  own produce purgatory; the channel stays muted (a ``DelayedResponse``) meanwhile.

After each marker appended, ``on_marker(topic, index, producer id, is COMMIT)`` is called
(the group coordinator's: a marker on ``__consumer_offsets`` completes the producer's
transactional offsets there); None: no hook.

A marker for a partition where the producer has no open transaction appends the marker
and completes nothing (Kafka does the same). The answer lists, per marker, its producer
id and each topic's partitions with their error codes.

Owner: the broker's loop thread.
"""
from __future__ import annotations

import logging
from collections import namedtuple

from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.delayed_produce import DelayedProduce, PendingPartition, ProducePurgatory
from replica_proc.delayed_response import DelayedResponse
from replica_proc.responses import build, code_of, error, module
from segments.producer_state import ORIGIN_COORDINATOR
from segments.record.control_record import ABORT, COMMIT, build_end_txn_marker

log = logging.getLogger(__name__)

#: How long the answer waits for the markers' replication (Kafka's request.timeout.ms).
REQUEST_TIMEOUT_MS = 30_000

#: One partition's answer; ``message`` says why it failed (logged, not sent: v1 has none).
MarkerResult = namedtuple("MarkerResult", "index error_code message")


class WriteTxnMarkersHandler:
    """Handles WriteTxnMarkers requests against ``replicas`` (a ReplicaManager).

    ``clock``: the loop's monotonic seconds; ``on_append(key, size)`` and
    ``on_high_watermark(partition, old_hw, size)``: as the produce handler's, so the
    markers wake parked fetches and move what waits on the high watermark.
    """

    def __init__(self, replicas, clock, on_append, on_high_watermark,
                 timeout_ms=REQUEST_TIMEOUT_MS):
        self._replicas = replicas
        self._clock = clock
        self._on_append = on_append
        self._on_high_watermark = on_high_watermark
        self._timeout_ms = timeout_ms
        self._purgatory = ProducePurgatory(lambda key: replicas.hosted(*key))
        #: ``on_marker(topic, index, producer id, is COMMIT)`` after an append (module doc).
        self.on_marker = None

    def __call__(self, channel, header, request):
        parked = []

        def respond(answers):
            if parked:
                parked[0].send(_encode(header, answers))
            else:
                channel.send(_encode(header, answers)())

        if not self.write(request, respond):
            parked.append(DelayedResponse(channel))

    def write(self, request, respond):
        """Append the markers of ``request`` (a WriteTxnMarkersRequest); ``respond(answers)``
        once they are replicated (the answer's content: [(producer id, [(topic,
        [MarkerResult])])], ``response(answers)`` builds the response). True if it was
        called during this call; the transaction coordinator of this broker calls this
        for the partitions it leads itself."""
        answers = []  # (producer id, [(topic, [MarkerResult])])
        waiting = []
        for marker in request.markers:
            control_type = COMMIT if marker.transaction_result else ABORT
            topics = []
            for topic in marker.topics:
                results = []
                for index in topic.partition_indexes:
                    results.append(self._append(topic.name, index, marker, control_type))
                    if not results[-1].error_code:
                        self._wait_for(waiting, topic.name, index, results)
                topics.append((topic.name, results))
            answers.append((marker.producer_id, topics))
        if not waiting:
            respond(answers)
            return True
        timeout = self._timeout_ms / 1000
        self._purgatory.park(DelayedProduce(self._clock() + timeout, self._timeout_ms,
                                            waiting, answers, respond))
        return False

    def _append(self, topic, index, marker, control_type):
        """Append ``marker``'s control batch to ``topic``-``index``; its MarkerResult."""
        what = (f"{'COMMIT' if control_type == COMMIT else 'ABORT'} marker of producer "
                f"{marker.producer_id} (epoch {marker.producer_epoch}) to {topic}-{index}")
        try:
            partition = self._replicas.leader(topic, index)
            batch = bytearray(build_end_txn_marker(
                control_type, marker.coordinator_epoch, marker.producer_id,
                marker.producer_epoch, partition.log.clock()))
            high_watermark = partition.high_watermark
            partition.append_as_leader(batch, -1, origin=ORIGIN_COORDINATOR)
        except Exception as exc:
            code = code_of(exc, what)
            log.info("%s failed: %s", what, exc)
            return MarkerResult(index, code, str(exc))
        if partition.followers:
            self._on_append((topic, index), len(batch))
        if partition.high_watermark > high_watermark:
            self._on_high_watermark(partition, high_watermark, None)
        if self.on_marker is not None:
            self.on_marker(topic, index, marker.producer_id, control_type == COMMIT)
        return MarkerResult(index, 0, None)

    def _wait_for(self, waiting, topic, index, results):
        """Make the answer wait for ``topic``-``index``'s HW to pass its log end (the
        marker just appended), with any earlier marker of this request to it."""
        partition = self._replicas.partition(topic, index)
        end = partition.log.log_end_offset
        if partition.high_watermark >= end:
            return
        key = (topic, index)
        for pending in waiting:
            if pending.key == key:
                pending.required_offset = end
                pending.slots.append((results, len(results) - 1))
                return
        waiting.append(_PendingMarkers(key, partition, end, results, len(results) - 1))

    # -- completing delayed answers ----------------------------------------------------------

    def on_high_watermark(self, key):
        """The HW of ``key`` moved: answer the requests it completes."""
        for done in self._purgatory.check(key):
            self._complete(done)

    def on_change(self, keys):
        """Partitions in ``keys`` changed (leader, ISR, deleted): answer what completes."""
        for done in self._purgatory.on_change(keys):
            self._complete(done)

    def expire(self, now):
        """Answer the requests whose timeout ran out by ``now`` (REQUEST_TIMED_OUT)."""
        for done in self._purgatory.expire(now):
            self._complete(done)

    def next_deadline(self):
        return self._purgatory.next_deadline()

    @staticmethod
    def _complete(done):
        done.context(done.topics)


class _PendingMarkers(PendingPartition):
    """A partition the answer waits for, with every marker of the request appended to it
    (two producers' transactions can end in one partition in one request)."""

    __slots__ = ("slots",)

    def __init__(self, key, partition, required_offset, results, i):
        super().__init__(key, partition, required_offset, results, i)
        self.slots = [(results, i)]

    def settle(self, error):
        if error is not None:
            for results, i in self.slots:
                results[i] = results[i]._replace(error_code=error.errno, message=str(error))


def response(answers, version=1):
    """The WriteTxnMarkersResponse of ``answers`` (``WriteTxnMarkersHandler.write``)."""
    m = module(ApiKey.WRITE_TXN_MARKERS, version)
    return build(m.WriteTxnMarkersResponse, markers=tuple(
        build(m.WritableTxnMarkerResult, producer_id=producer_id, topics=tuple(
            build(m.WritableTxnMarkerTopicResult, name=name, partitions=tuple(
                build(m.WritableTxnMarkerPartitionResult, partition_index=r.index,
                      error_code=error(r.error_code)) for r in results))
            for name, results in topics))
        for producer_id, topics in answers))


def _encode(header, answers):
    """A function encoding the WriteTxnMarkers response for ``answers``."""
    encoded = response(answers, header.request_api_version)
    return lambda: protocol.encode_response(encoded, header.correlation_id)
