"""Produce v3-8: validate, stamp and append each partition's batches; answer with offsets.

Per partition, in request order: an internal topic (``__consumer_offsets``: only its group
coordinator appends to it) is INVALID_TOPIC_EXCEPTION, as Kafka answers clients; the
partition must exist (UNKNOWN_TOPIC_OR_PARTITION) and be led by this broker
(NOT_LEADER_OR_FOLLOWER); ``acks`` must be 0, 1 or -1
(INVALID_REQUIRED_ACKS); the records must hold at least one batch (INVALID_RECORD); then
``Partition.append_as_leader`` validates every batch — framing, CRC-32C (CORRUPT_MESSAGE),
size against max.message.bytes (MESSAGE_TOO_LARGE) — before anything is written, so a bad
batch appends nothing, stamps offsets and the leader epoch and appends. The batches are
never decoded. acks=-1 (all) with fewer ISR members than min.insync.replicas fails with
NOT_ENOUGH_REPLICAS before appending (Kafka's Partition.appendRecordsToLeader); otherwise the answer
waits until the high watermark of every partition appended to has passed its batches: at once when
it already has (the ISR is the leader alone: replication factor 1 costs nothing more), else in the
produce purgatory (``delayed_produce``) until followers
fetch, leadership is lost or the request's ``timeout_ms`` runs out. Meanwhile the channel goes on
reading the connection's next Produce requests, whose answers leave after this one
(``channel``, ``Channel.wait_for``). A full or failing
disk answers KAFKA_STORAGE_ERROR (retriable, with a metadata refresh) for that partition
alone, nothing of its batches appended (segments.log, "Failed writes"); so does a
partition whose log went offline.

Idempotent producers (``segments.producer_state``, checked by the log before it writes):
a sequence gap, or a retry older than the producer's last 5 batches, is
OUT_OF_ORDER_SEQUENCE_NUMBER; an epoch older than the producer's INVALID_PRODUCER_EPOCH;
a non-transactional batch of a producer with an open transaction INVALID_TXN_STATE. A
retry of one of its last 5 batches is a duplicate: nothing is appended and the answer is
no error with the original base offset (and, with LogAppendTime, the original append
time), as Kafka answers. With acks=all a duplicate waits, as its original would, until
the HW passes the original's last offset — at once when it already has.

Each partition's error carries a message naming the bad value (``error_message``, v8).
acks=0: no response at all, as Kafka; and as Kafka, if any partition failed, the
connection is closed so the producer learns something went wrong.

The answer is packed by ``produce_response`` (not kio: it costs as much as the append).
After an append, ``on_append(key, size)`` lets followers' parked fetches of the partition
complete (when it has followers), and if the append moved the high watermark,
``on_high_watermark(partition, old_hw, size)`` lets consumers' parked fetches and delayed
produces complete.

Owner: the broker's loop thread.
"""
from __future__ import annotations

import logging

from cluster.errors import InvalidRecordError, InvalidRequiredAcksError, InvalidTopicError
from cluster.metadata.model import INTERNAL_TOPICS
from cluster.protocol import frames
from cluster.protocol.frames import ApiKey
from cluster.protocol.produce_response import PartitionResult, produce_response_frame
from replica_proc.channel import CloseConnection
from replica_proc.delayed_produce import DelayedProduce, PendingPartition
from replica_proc.responses import code_of
from segments.log import DuplicateAppend
from segments.record.batch_header import BatchHeader

log = logging.getLogger(__name__)

frames.load_codecs(ApiKey.PRODUCE)  # with the broker's imports, not at its first Produce

ACKS = (0, 1, -1)
#: ``base_offset``, ``log_start_offset`` and ``log_append_time`` of a partition's answer
#: when they are unknown (it failed, or the topic uses CreateTime).
UNKNOWN = -1


class ProduceHandler:
    """Handles Produce requests against ``replicas`` (a ReplicaManager), parking acks=all
    ones in ``purgatory`` (a ProducePurgatory). ``clock``: the loop's monotonic seconds."""

    def __init__(self, replicas, purgatory, clock, on_append, on_high_watermark):
        self._replicas = replicas
        self._purgatory = purgatory
        self._clock = clock
        self._on_append = on_append
        self._on_high_watermark = on_high_watermark
        self.records_in = 0  # records and bytes appended (the stats page's, broker_stats)
        self.bytes_in = 0
        #: (topic, index) -> the offset an acks=all duplicate waits for (the original's
        #: last offset + 1), from its append to its ``_wait_for`` in the same request.
        self._duplicate_ends = {}

    def __call__(self, channel, header, request):
        acks = request.acks
        append = self._append
        failures = []
        topics = []
        waiting = [] if acks == -1 else None
        for topic in request.topic_data:
            name = topic.name
            results = []
            for data in topic.partition_data:
                result = append(name, data.index, data.records, acks)
                results.append(result)
                if result.error_code:
                    failures.append(f"{name}-{result.index}: {result.message}")
                elif waiting is not None:
                    self._wait_for(waiting, name, result.index, results)
            topics.append((name, results))
        if acks == 0:
            if failures:
                raise CloseConnection(f"acks=0 produce failed: {'; '.join(failures)}")
            return
        if waiting:
            timeout = request.timeout.total_seconds()
            produce = DelayedProduce(self._clock() + timeout, round(timeout * 1000), waiting,
                                     topics, (channel, header))
            self._purgatory.park(produce)
            channel.wait_for(produce)
            return
        channel.send(produce_response_frame(header.request_api_version,
                                            header.correlation_id, topics))

    def _wait_for(self, waiting, topic, index, results):
        """Add ``topic``-``index`` to ``waiting`` if its HW is below its log end (what was
        just appended is not yet replicated)."""
        partition = self._replicas.partition(topic, index)
        end = partition.log.log_end_offset
        if self._duplicate_ends:
            end = self._duplicate_ends.pop((topic, index), end)
        if partition.high_watermark < end:
            waiting.append(PendingPartition((topic, index), partition, end, results,
                                            len(results) - 1))

    # -- completing delayed produces --------------------------------------------------------

    def on_high_watermark(self, key):
        """The HW of ``key`` moved: answer the produces it completes."""
        for produce in self._purgatory.check(key):
            self._complete(produce)

    def on_change(self, keys):
        """Partitions in ``keys`` changed (leader, ISR, deleted): answer what completes."""
        for produce in self._purgatory.on_change(keys):
            self._complete(produce)

    def expire(self, now):
        """Answer the produces whose timeout ran out by ``now`` (REQUEST_TIMED_OUT)."""
        for produce in self._purgatory.expire(now):
            self._complete(produce)

    def next_deadline(self):
        return self._purgatory.next_deadline()

    def cancel(self, produce):
        """Its client went away: forget ``produce``."""
        self._purgatory.cancel(produce)

    def _complete(self, produce):
        """Answer a produce leaving the purgatory (in its channel's request order). Like a parked
        fetch's answer (fetch_handler), a failure marks that channel for closing."""
        channel, header = produce.context
        try:
            channel.answer(produce, produce_response_frame(
                header.request_api_version, header.correlation_id, produce.topics))
        except Exception as exc:
            log.exception("%s: answering a delayed produce failed", channel.name)
            channel.closing = f"answering a delayed produce failed: {exc!r}"

    def _append(self, topic, index, records, acks):
        """The PartitionResult of appending ``records`` to ``topic``-``index``."""
        try:
            if acks not in ACKS:
                raise InvalidRequiredAcksError(f"acks={acks}; expected one of 0, 1, -1 (all)")
            if topic in INTERNAL_TOPICS:
                raise InvalidTopicError(f"cannot append to internal topic {topic}")
            partition = self._replicas.leader(topic, index)
            if not records:
                raise InvalidRecordError(
                    f"produce to {topic}-{index} carries no record batch (records "
                    f"{'null' if records is None else 'empty'})")
            high_watermark = partition.high_watermark
            if partition.log.config.log_append_time:
                records = bytearray(records)  # stamped in place: the time can be read back
                base_offset = partition.append_as_leader(records, acks)
                append_time = BatchHeader(records).max_timestamp
            else:
                base_offset = partition.append_as_leader(records, acks)
                append_time = UNKNOWN
        except Exception as exc:
            code = code_of(exc, f"produce to {topic}-{index}")
            return PartitionResult(index, code, UNKNOWN, UNKNOWN, UNKNOWN, _message(exc))
        if base_offset.__class__ is DuplicateAppend:
            return self._duplicate(topic, index, partition, base_offset, acks)
        size = len(records)
        self.records_in += partition.log.log_end_offset - base_offset
        self.bytes_in += size
        if partition.followers:
            self._on_append((topic, index), size)
        if partition.high_watermark > high_watermark:
            # What came below the HW is this append's batches if the HW was at the log end
            # before it (always so for replication factor 1); else the caller measures.
            self._on_high_watermark(partition, high_watermark,
                                    size if high_watermark == base_offset else None)
        return PartitionResult(index, 0, base_offset, append_time,
                               partition.log.log_start_offset, None)


    def _duplicate(self, topic, index, partition, duplicate, acks):
        """The answer to a retried batch the log holds already: its original offsets."""
        first, last = duplicate
        if acks == -1:
            self._duplicate_ends[(topic, index)] = last + 1
        append_time = duplicate.max_timestamp if partition.log.config.log_append_time \
            else UNKNOWN
        return PartitionResult(index, 0, first, append_time, partition.log.log_start_offset,
                               None)


def _message(exc):
    """The error's own text: the client prefixes its error class and code itself."""
    if len(exc.args) == 1 and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc)
