"""OffsetCommit v2-7, TxnOffsetCommit v0-3, OffsetFetch v1-7, OffsetDelete v0: committed
offsets, decoded here and decided by the broker's ``GroupCoordinator``
(``group_coordinator.runtime``).

- OffsetCommit parks its channel (``delayed_response``) until the commit is stored with
  acks=all or failed. A partition of a topic the metadata does not know (or beyond its
  partition count) answers UNKNOWN_TOPIC_OR_PARTITION and is not committed, as Kafka
  checks before the coordinator. v2-4's ``retention_time_ms`` is ignored (Kafka turns one
  other than -1 into the offset's expire timestamp; the field is gone from v5): offsets
  expire after ``offsets.retention.minutes``.
- TxnOffsetCommit parks the same way; its offsets are stored in the producer's
  transaction and become committed offsets with its COMMIT marker
  (``GroupCoordinator.commit_transactional_offsets``); unknown partitions as OffsetCommit.
  v3 (flexible) carries the consumer's generation, member id and group instance id, which
  the coordinator checks (KIP-447); v0-2 are taken as generation -1 without a member.
- OffsetFetch answers at once; ``topics`` null (v2+) asks for every committed partition.
  v1 has no top-level error: a group error is answered in every partition asked for.
  v7's ``require_stable`` (a read_committed consumer, KIP-447): a partition whose offset
  is being stored or pending in an open transaction answers UNSTABLE_OFFSET_COMMIT.
- OffsetDelete parks until the tombstones are stored; unknown partitions answer
  UNKNOWN_TOPIC_OR_PARTITION.

Every request makes sure ``__consumer_offsets`` exists (created on first use).

Owner: the broker's loop thread.
"""
from __future__ import annotations

from cluster.errors import UnknownTopicOrPartitionError
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.delayed_response import DelayedResponse
from replica_proc.group_coordinator.results import (
    NO_LEADER_EPOCH,
    UNKNOWN_GENERATION,
    UNKNOWN_MEMBER_ID,
)
from replica_proc.responses import NO_THROTTLE, build, encoder, error, module


def _by_topic(pairs):
    """[((topic, partition), value)] -> {topic: [(partition, value)]}, in order."""
    topics = {}
    for (topic, partition), value in pairs:
        topics.setdefault(topic, []).append((partition, value))
    return topics


class OffsetHandler:
    """The committed-offsets APIs over ``runtime`` (a GroupRuntime); ``metadata``: the
    BrokerMetadata (which partitions exist); ``clock``: the loop's monotonic seconds."""

    def __init__(self, runtime, metadata, clock):
        self._runtime = runtime
        self._coordinator = runtime.coordinator
        self._metadata = metadata
        self._clock = clock

    def handlers(self):
        """{ApiKey: handler(channel, header, request)}."""
        return {
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.TXN_OFFSET_COMMIT: self.txn_offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.OFFSET_DELETE: self.offset_delete,
        }

    def _exists(self, topic, partition):
        info = self._metadata.image.topics.get(topic)
        return info is not None and 0 <= partition < len(info.partitions)

    # -- OffsetCommit -----------------------------------------------------------------------

    def offset_commit(self, channel, header, request):
        def commit(offsets, respond):
            self._coordinator.commit_offsets(
                self._clock(), request.group_id, request.generation_id_or_member_epoch,
                request.member_id, getattr(request, "group_instance_id", None), offsets,
                respond)
        self._commit(channel, header, request, ApiKey.OFFSET_COMMIT, "OffsetCommit", commit)

    # -- TxnOffsetCommit --------------------------------------------------------------------

    def txn_offset_commit(self, channel, header, request):
        def commit(offsets, respond):
            self._coordinator.commit_transactional_offsets(
                self._clock(), request.group_id, request.producer_id, request.producer_epoch,
                offsets, respond, getattr(request, "generation_id", UNKNOWN_GENERATION),
                getattr(request, "member_id", UNKNOWN_MEMBER_ID),
                getattr(request, "group_instance_id", None))
        self._commit(channel, header, request, ApiKey.TXN_OFFSET_COMMIT, "TxnOffsetCommit",
                     commit)

    def _commit(self, channel, header, request, api_key, name, commit):
        """OffsetCommit and TxnOffsetCommit alike: the partitions that exist go to
        ``commit(offsets, respond)``, the others are UNKNOWN_TOPIC_OR_PARTITION; the answer
        (``<name>Response``) waits until ``respond(errors)`` is called."""
        self._runtime.topic()
        classes = module(api_key, header.request_api_version)
        asked = [((t.name, p.partition_index), p) for t in request.topics for p in t.partitions]
        offsets = {tp: (p.committed_offset,
                        getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH),
                        p.committed_metadata)
                   for tp, p in asked if self._exists(*tp)}
        unknown = {tp: UnknownTopicOrPartitionError.errno for tp, _ in asked
                   if tp not in offsets}
        response, topic_class, partition_class = (
            getattr(classes, name + suffix) for suffix in
            ("Response", "ResponseTopic", "ResponsePartition"))

        def respond(errors):
            answers = {**unknown, **errors}
            parked.send(encoder(header, build(
                response, throttle_time=NO_THROTTLE,
                topics=tuple(build(topic_class, name=topic, partitions=tuple(
                    build(partition_class, partition_index=partition,
                          error_code=error(answers[(topic, partition)]))
                    for partition, _ in partitions))
                    for topic, partitions in _by_topic(asked).items()))))

        parked = DelayedResponse(channel)
        if not offsets:
            # Kafka answers the unknown partitions without asking the coordinator.
            respond({})
            return
        commit(offsets, respond)

    # -- OffsetFetch ------------------------------------------------------------------------

    def offset_fetch(self, channel, header, request):
        self._runtime.topic()
        version = header.request_api_version
        classes = module(ApiKey.OFFSET_FETCH, version)
        asked = None if request.topics is None else [
            (t.name, p) for t in request.topics for p in t.partition_indexes]
        code, committed = self._coordinator.fetch_offsets(
            request.group_id, asked, getattr(request, "require_stable", False))
        if code and version < 2:  # no top-level error: each partition carries it
            answers = [(tp, None) for tp in asked]
        else:
            answers = [(tp, committed[tp]) for tp in (committed if asked is None else asked)
                       if tp in committed]

        def partition(index, value):
            if value is None:
                return build(classes.OffsetFetchResponsePartition, partition_index=index,
                             committed_offset=-1, committed_leader_epoch=NO_LEADER_EPOCH,
                             metadata="", error_code=error(code))
            return build(classes.OffsetFetchResponsePartition, partition_index=index,
                         committed_offset=value.offset,
                         committed_leader_epoch=value.leader_epoch, metadata=value.metadata,
                         error_code=error(value.error))

        channel.send(protocol.encode_response(build(
            classes.OffsetFetchResponse, throttle_time=NO_THROTTLE, error_code=error(code),
            topics=tuple(build(classes.OffsetFetchResponseTopic, name=topic,
                               partitions=tuple(partition(i, v) for i, v in partitions))
                         for topic, partitions in _by_topic(answers).items())),
            header.correlation_id))

    # -- OffsetDelete -----------------------------------------------------------------------

    def offset_delete(self, channel, header, request):
        self._runtime.topic()
        classes = module(ApiKey.OFFSET_DELETE, header.request_api_version)
        asked = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
        known = [tp for tp in asked if self._exists(*tp)]

        def respond(code, errors):
            answers = {tp: errors.get(tp, UnknownTopicOrPartitionError.errno)
                       for tp in asked}
            parked.send(encoder(header, build(
                classes.OffsetDeleteResponse, throttle_time=NO_THROTTLE,
                error_code=error(code),
                topics=() if code else tuple(build(
                    classes.OffsetDeleteResponseTopic, name=topic, partitions=tuple(
                        build(classes.OffsetDeleteResponsePartition, partition_index=i,
                              error_code=error(e)) for i, e in partitions))
                    for topic, partitions in _by_topic(answers.items()).items()))))

        parked = DelayedResponse(channel)
        self._coordinator.delete_offsets(request.group_id, known, respond)
