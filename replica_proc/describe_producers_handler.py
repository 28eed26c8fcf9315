"""DescribeProducers v0 (KIP-664, ``kafka-transactions.sh describe-producers``): the
producer state a replica keeps for each partition asked about.

Per partition, as Kafka's ``KafkaApis`` and ``ReplicaManager.activeProducerState``: a topic
name that is not valid answers INVALID_TOPIC_EXCEPTION; a topic or partition the metadata
does not have UNKNOWN_TOPIC_OR_PARTITION; a partition with no replica on this broker
NOT_LEADER_OR_FOLLOWER, an offline one KAFKA_STORAGE_ERROR. Any replica answers, leader or
follower (an admin client asks the leader unless told a broker). Each active producer:
its id, epoch, last sequence, last timestamp, the epoch of the last coordinator that wrote
it a marker (-1: none) and the first offset of its open transaction (-1: none) —
``segments.producer_state``'s entry. An error carries its message.

Owner: the broker's loop thread.
"""
from __future__ import annotations

from cluster.errors import InvalidTopicError
from cluster.metadata.model import validate_topic_name
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.responses import NO_THROTTLE, build, code_of, error, module


class DescribeProducersHandler:
    """Handles DescribeProducers requests against ``replicas`` (a ReplicaManager)."""

    def __init__(self, replicas):
        self._replicas = replicas

    def __call__(self, channel, header, request):
        classes = module(ApiKey.DESCRIBE_PRODUCERS, header.request_api_version)
        topics = []
        for topic in request.topics:
            try:
                validate_topic_name(topic.name)
                invalid = None
            except InvalidTopicError as exc:
                invalid = exc
            partitions = []
            for index in topic.partition_indexes:
                producers, code, message = (), InvalidTopicError.errno, str(invalid)
                if invalid is None:
                    try:
                        producers = self._replicas.partition(topic.name,
                                                             index).active_producers()
                        code, message = 0, None
                    except Exception as exc:
                        code = code_of(exc, f"DescribeProducers of {topic.name}-{index}")
                        message = str(exc)
                partitions.append(build(
                    classes.PartitionResponse, partition_index=index, error_code=error(code),
                    error_message=message, active_producers=tuple(build(
                        classes.ProducerState, producer_id=p.producer_id,
                        producer_epoch=p.producer_epoch, last_sequence=p.last_seq,
                        last_timestamp=p.last_timestamp,
                        coordinator_epoch=p.coordinator_epoch,
                        current_txn_start_offset=p.current_txn_first_offset)
                        for p in sorted(producers, key=lambda p: p.producer_id))))
            topics.append(build(classes.TopicResponse, name=topic.name,
                                partitions=tuple(partitions)))
        response = build(classes.DescribeProducersResponse, throttle_time=NO_THROTTLE,
                         topics=tuple(topics))
        channel.send(protocol.encode_response(response, header.correlation_id))
