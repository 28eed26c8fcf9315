"""Produce v3-8: validate, stamp and append each partition's batches; answer with offsets.

Per partition, in request order: the partition must exist (UNKNOWN_TOPIC_OR_PARTITION) and
be led by this broker (NOT_LEADER_OR_FOLLOWER); ``acks`` must be 0, 1 or -1
(INVALID_REQUIRED_ACKS); the records must hold at least one batch (INVALID_RECORD); then
``Partition.append_as_leader`` validates every batch — framing, CRC-32C (CORRUPT_MESSAGE),
size against max.message.bytes (MESSAGE_TOO_LARGE) — before anything is written, so a bad
batch appends nothing, stamps offsets and the leader epoch and appends. The batches are
never decoded. acks=-1 (all) with fewer ISR members than min.insync.replicas fails with
NOT_ENOUGH_REPLICAS before appending; otherwise it is answered like acks=1. That is
Kafka's rule while the ISR is the leader alone (replication factor 1: the append moves the
high watermark past the batch at once); waiting for followers (Kafka's DelayedProduce)
comes with replication. A full or failing disk answers KAFKA_STORAGE_ERROR (retriable,
with a metadata refresh) for that partition alone, nothing of its batches appended
(segments.log, "Failed writes"); so does a partition whose log went offline.

Each partition's error carries a message naming the bad value (``error_message``, v8).
acks=0: no response at all, as Kafka; and as Kafka, if any partition failed, the
connection is closed so the producer learns something went wrong.

The answer is packed by ``produce_response`` (not kio: it costs as much as the append).
After an append that moved the high watermark, ``on_append(key, size)`` lets parked
fetches of the partition complete.

Owner: the broker's loop thread.
"""
from __future__ import annotations

from cluster.errors import InvalidRecordError, InvalidRequiredAcksError
from cluster.protocol.produce_response import PartitionResult, produce_response_frame
from replica_proc.channel import CloseConnection
from replica_proc.responses import code_of
from segments.batch_header import BatchHeader

ACKS = (0, 1, -1)
#: ``base_offset``, ``log_start_offset`` and ``log_append_time`` of a partition's answer
#: when they are unknown (it failed, or the topic uses CreateTime).
UNKNOWN = -1


class ProduceHandler:
    """Handles Produce requests against ``replicas`` (a ReplicaManager)."""

    def __init__(self, replicas, on_append):
        self._replicas = replicas
        self._on_append = on_append

    def __call__(self, channel, header, request):
        acks = request.acks
        append = self._append
        failures = []
        topics = []
        for topic in request.topic_data:
            name = topic.name
            results = [append(name, data.index, data.records, acks)
                       for data in topic.partition_data]
            failures += [f"{name}-{r.index}: {r.message}" for r in results if r.error_code]
            topics.append((name, results))
        if acks == 0:
            if failures:
                raise CloseConnection(f"acks=0 produce failed: {'; '.join(failures)}")
            return
        channel.send(produce_response_frame(header.request_api_version,
                                            header.correlation_id, topics))

    def _append(self, topic, index, records, acks):
        """The PartitionResult of appending ``records`` to ``topic``-``index``."""
        try:
            if acks not in ACKS:
                raise InvalidRequiredAcksError(f"acks={acks}; expected one of 0, 1, -1 (all)")
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
        if partition.high_watermark > high_watermark:
            self._on_append((topic, index), len(records))
        return PartitionResult(index, 0, base_offset, append_time,
                               partition.log.log_start_offset, None)


def _message(exc):
    """The error's own text: the client prefixes its error class and code itself."""
    if len(exc.args) == 1 and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc)
