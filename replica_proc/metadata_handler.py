"""Metadata v1-8: brokers, controller and topics from the current image; auto-creation.

Topics asked for by name that do not exist are created when the request allows it
(``allow_auto_topic_creation``, v4+; always before v4, as Kafka) and the broker's
``auto.create.topics.enable`` is on: the name must pass Kafka's rule (else
INVALID_TOPIC_EXCEPTION), then the topic is created with the broker's num.partitions and
default.replication.factor — by this broker's controller when it is the active one, else
by a CreateTopics forwarded to the controller broker without waiting for it — and answered
LEADER_NOT_AVAILABLE meanwhile, as Kafka does; clients ask again. Otherwise an unknown
topic is UNKNOWN_TOPIC_OR_PARTITION. ``topics`` null asks for every topic.

Brokers listed are the live ones; a broker's ``host`` is the name of its shared-memory
listener (where clients connect) and ``port`` its id. A partition without a leader says
LEADER_NOT_AVAILABLE; ``offline_replicas`` (v5+) are its replicas on brokers not alive,
and this broker's own replica when it is offline (``ReplicaManager.offline``: its files
could not be read); a partition this broker leads whose replica here is offline says
KAFKA_STORAGE_ERROR, as its Produce and Fetch answers do.

Owner: the broker's loop thread.
"""
from __future__ import annotations

import logging

from cluster.errors import (
    InvalidTopicError,
    KafkaStorageError,
    LeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)
from cluster.metadata.model import validate_topic_name
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.responses import NO_THROTTLE, build, error, module
from shm_ring.naming import listener_name

log = logging.getLogger(__name__)


class MetadataHandler:
    """Answers Metadata requests from ``metadata.image`` (a BrokerMetadata) and the
    offline replicas of ``replicas`` (the ReplicaManager).

    ``auto_create(names)`` creates topics (the admin handler's, which knows where the
    controller is).
    """

    def __init__(self, broker_id, config, metadata, replicas, auto_create):
        self._broker_id = broker_id
        self._replicas = replicas
        self._auto_create_enabled = config["auto.create.topics.enable"]
        self._metadata = metadata
        self._auto_create = auto_create

    def __call__(self, channel, header, request):
        version = header.request_api_version
        classes = module(ApiKey.METADATA, version)
        image = self._metadata.image
        if request.topics is None:
            names = list(image.topics)
        else:
            names = list(dict.fromkeys(t.name for t in request.topics))
        allow = getattr(request, "allow_auto_topic_creation", True) and \
            self._auto_create_enabled
        live = image.live_brokers()
        topics = []
        to_create = []
        for name in names:
            info = image.topics.get(name)
            if info is not None:
                topics.append(self._topic(classes, set(live), info))
                continue
            try:
                validate_topic_name(name)
                code = UnknownTopicOrPartitionError.errno
                if allow:
                    to_create.append(name)
                    code = LeaderNotAvailableError.errno
            except InvalidTopicError:
                code = InvalidTopicError.errno
            topics.append(build(classes.MetadataResponseTopic, error_code=error(code),
                                name=name, is_internal=False, partitions=()))
        if to_create:
            self._auto_create(to_create)
        brokers = tuple(
            build(classes.MetadataResponseBroker, node_id=b,
                  host=listener_name(self._metadata.namespace, b), port=b, rack=None)
            for b in live)
        response = build(classes.MetadataResponse, throttle_time=NO_THROTTLE, brokers=brokers,
                         cluster_id=image.cluster_id, controller_id=image.controller_id,
                         topics=tuple(topics))
        channel.send(protocol.encode_response(response, header.correlation_id))

    def _topic(self, classes, live, info):
        partitions = tuple(self._partition(classes, live, p) for p in info.partitions)
        return build(classes.MetadataResponseTopic, error_code=error(0), name=info.name,
                     is_internal=info.internal, partitions=partitions)

    def _partition(self, classes, live, p):
        code = 0 if p.online else LeaderNotAvailableError.errno
        offline = [r for r in p.replicas if r not in live]
        if self._broker_id in p.replicas and self._replicas.offline(p.topic, p.partition):
            offline.append(self._broker_id)
            if p.leader == self._broker_id:
                code = KafkaStorageError.errno
        return build(classes.MetadataResponsePartition, error_code=error(code),
                     partition_index=p.partition, leader_id=p.leader,
                     leader_epoch=p.leader_epoch, replica_nodes=tuple(p.replicas),
                     isr_nodes=tuple(p.isr), offline_replicas=tuple(offline))
