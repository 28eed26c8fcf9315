"""ListOffsets v1-5: the offset for a timestamp, per partition.

``timestamp`` -2 (earliest) gives the log start offset, -1 (latest) the high watermark —
the last stable offset for ``isolation_level`` 1 (read_committed, v2+) — any other value
the first record whose timestamp is at or after it, below that same bound, or offset -1
and timestamp -1 when there is none, as Kafka. The partition must be led
here, in the client's ``current_leader_epoch`` if it sends one (v4+). ``leader_epoch`` in
the answer (v4+) is the current leader epoch for -1 and unknown (-1) otherwise: there is
no leader-epoch cache to look an older offset's epoch up in.

Owner: the broker's loop thread.
"""
from __future__ import annotations

from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.responses import NO_THROTTLE, build, code_of, error, module
from segments.log import LATEST_TIMESTAMP

UNKNOWN_EPOCH = -1
#: ListOffsets' isolation_level for read_committed.
READ_COMMITTED = 1


class ListOffsetsHandler:
    """Handles ListOffsets requests against ``replicas`` (a ReplicaManager)."""

    def __init__(self, replicas):
        self._replicas = replicas

    def __call__(self, channel, header, request):
        classes = module(ApiKey.LIST_OFFSETS, header.request_api_version)
        read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                try:
                    partition = self._replicas.leader(
                        topic.name, p.partition_index, getattr(p, "current_leader_epoch", -1))
                    timestamp, offset = partition.offset_for(p.timestamp, read_committed)
                    epoch = (partition.leader_epoch if p.timestamp == LATEST_TIMESTAMP
                             else UNKNOWN_EPOCH)
                    code = 0
                except Exception as exc:
                    code = code_of(exc, f"ListOffsets of {topic.name}-{p.partition_index}")
                    timestamp, offset, epoch = -1, -1, UNKNOWN_EPOCH
                partitions.append(build(
                    classes.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                    error_code=error(code), timestamp=timestamp, offset=offset,
                    leader_epoch=epoch))
            topics.append(build(classes.ListOffsetsTopicResponse, name=topic.name,
                                partitions=tuple(partitions)))
        response = build(classes.ListOffsetsResponse, throttle_time=NO_THROTTLE,
                         topics=tuple(topics))
        channel.send(protocol.encode_response(response, header.correlation_id))
