"""AlterPartition v2-3 (KIP-497): a partition leader's ISR change, answered by the controller.

Only the broker whose ``Controller`` is active answers; any other answers NOT_CONTROLLER at
the top level (the sender, ``alter_partition_manager``, looks the controller up in the
metadata and sends again). Topics are named by id (v2+); an id the image does not know
answers UNKNOWN_TOPIC_ID for its partitions. The rest is ``Controller.alter_partition``;
each partition's answer carries its new state (leader, leader epoch, ISR, partition epoch)
or its error with the leader -1. Broker epochs (v3's ``new_isr_with_epochs``, the request's
``broker_epoch``) are not checked: ringlog has none, Kafka's -1.

Owner: the broker's loop thread.
"""
from __future__ import annotations

import logging

from cluster.errors import NotControllerError, UnknownTopicIdError
from cluster.metadata import data_dir as dd
from cluster.metadata.model import NO_LEADER
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.controller.controller import IsrChange
from replica_proc.responses import NO_THROTTLE, build, code_of, error, module

log = logging.getLogger(__name__)


def new_isr(partition):
    """The broker ids of an AlterPartition request partition's new ISR (v2 or v3)."""
    with_epochs = getattr(partition, "new_isr_with_epochs", None)
    if with_epochs is not None:
        return tuple(member.broker_id for member in with_epochs)
    return tuple(partition.new_isr)


class AlterPartitionHandler:
    """AlterPartition against ``controller`` (None: this broker never runs one);
    ``on_metadata_change()`` makes the broker apply the image the controller published."""

    def __init__(self, controller, on_metadata_change):
        self._controller = controller
        self._on_metadata_change = on_metadata_change

    def __call__(self, channel, header, request):
        classes = module(ApiKey.ALTER_PARTITION, header.request_api_version)
        response = self.answer(classes, request)
        channel.send(protocol.encode_response(response, header.correlation_id))

    def answer(self, classes, request):
        """The AlterPartitionResponse (of the kio ``classes`` module) to ``request``."""
        controller = self._controller
        if controller is None or not controller.active:
            return build(classes.AlterPartitionResponse, throttle_time=NO_THROTTLE,
                         error_code=error(NotControllerError.errno), topics=())
        names = {dd.uuid_of(t.topic_id): t.name for t in controller.image.topics.values()}
        changes = [IsrChange(names[t.topic_id], p.partition_index, p.leader_epoch,
                             p.partition_epoch, new_isr(p))
                   for t in request.topics if t.topic_id in names for p in t.partitions]
        try:
            results = controller.alter_partition(request.broker_id, changes)
        except Exception as exc:
            return build(classes.AlterPartitionResponse, throttle_time=NO_THROTTLE,
                         error_code=error(code_of(exc, "AlterPartition")), topics=())
        if any(code == 0 for code, _ in results.values()):
            self._on_metadata_change()
        topics = []
        for topic in request.topics:
            name = names.get(topic.topic_id)
            partitions = []
            for p in topic.partitions:
                code, state = ((UnknownTopicIdError.errno, None) if name is None
                               else results[(name, p.partition_index)])
                partitions.append(build(
                    classes.PartitionData, partition_index=p.partition_index,
                    error_code=error(code),
                    leader_id=NO_LEADER if state is None else state.leader,
                    leader_epoch=-1 if state is None else state.leader_epoch,
                    isr=() if state is None else tuple(state.isr),
                    partition_epoch=-1 if state is None else state.partition_epoch))
            topics.append(build(classes.TopicData, topic_id=topic.topic_id,
                                partitions=tuple(partitions)))
        return build(classes.AlterPartitionResponse, throttle_time=NO_THROTTLE,
                     error_code=error(0), topics=tuple(topics))
