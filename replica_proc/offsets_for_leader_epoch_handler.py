"""OffsetsForLeaderEpoch v2-3 (API key 23): the end offset of a leader epoch, per partition.

A follower asks it for the end of its latest epoch to find where its log departs from the
leader's (KIP-101, KIP-279; ``replica_proc.truncation``); a consumer asks it after a
leader change to detect a truncated log (KIP-320). Per partition, in Kafka's order
(Partition.lastOffsetForLeaderEpoch):

- a topic or partition the metadata does not have: UNKNOWN_TOPIC_OR_PARTITION; one not
  hosted here: NOT_LEADER_OR_FOLLOWER; an offline replica: KAFKA_STORAGE_ERROR;
- ``current_leader_epoch`` (>= 0) older than this replica's epoch: FENCED_LEADER_EPOCH;
  newer: UNKNOWN_LEADER_EPOCH;
- a replica that does not lead: NOT_LEADER_OR_FOLLOWER. Only the leader answers, whoever
  asks: a follower (v3 ``replica_id`` >= 0), a consumer (-1) or a v2 client (no
  ``replica_id``), as Kafka answers with fetchOnlyFromLeader always true;
- otherwise ``(leader_epoch, end_offset)`` from the log's leader-epoch cache
  (Kafka's LeaderEpochFileCache.endOffsetFor): the latest epoch ends at the log end offset, an older
  one where the next epoch starts (for an epoch the cache lacks: the largest epoch below it), an
  epoch below every entry at the first entry's start, and an undefined or too-new epoch
  (or an empty cache) gives (-1, -1).

Owner: the broker's loop thread.
"""
from __future__ import annotations

from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.responses import NO_THROTTLE, build, code_of, error, module
from segments.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET


class OffsetsForLeaderEpochHandler:
    """Handles OffsetsForLeaderEpoch requests against ``replicas`` (a ReplicaManager)."""

    def __init__(self, replicas):
        self._replicas = replicas

    def __call__(self, channel, header, request):
        classes = module(ApiKey.OFFSET_FOR_LEADER_EPOCH, header.request_api_version)
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                try:
                    epoch, end_offset = self._end_offset(topic.topic, p)
                    code = 0
                except Exception as exc:
                    code = code_of(exc, f"OffsetsForLeaderEpoch of {topic.topic}-"
                                        f"{p.partition}")
                    epoch, end_offset = UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
                partitions.append(build(
                    classes.EpochEndOffset, error_code=error(code), partition=p.partition,
                    leader_epoch=epoch, end_offset=end_offset))
            topics.append(build(classes.OffsetForLeaderTopicResult, topic=topic.topic,
                                partitions=tuple(partitions)))
        response = build(classes.OffsetForLeaderEpochResponse, throttle_time=NO_THROTTLE,
                         topics=tuple(topics))
        channel.send(protocol.encode_response(response, header.correlation_id))

    def _end_offset(self, topic, request):
        """``(epoch, end_offset)`` for one partition of the request, else raise."""
        partition = self._replicas.partition(topic, request.partition)
        partition.check_epoch(request.current_leader_epoch)
        partition = self._replicas.leader(topic, request.partition)
        log = partition.log
        return log.leader_epoch_cache.end_offset_for(request.leader_epoch, log.log_end_offset)
