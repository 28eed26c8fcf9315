"""The partition leader's sender of ISR changes to the controller (Kafka's
AlterPartitionManager, KIP-497).

A leader that wants to shrink or expand a partition's ISR calls ``submit(topic, index,
leader_epoch, partition_epoch, new_isr, callback)``; the change goes to the active
controller, and ``callback(error_code, new_state)`` is called from ``poll()`` with the
partition's new ``PartitionState`` (leader, leader epoch, ISR, partition epoch; replicas
from this broker's image) and 0, or with Kafka's error code and None
(FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, INVALID_UPDATE_VERSION, INELIGIBLE_REPLICA,
UNKNOWN_TOPIC_OR_PARTITION: the leader drops its change and waits for the metadata to
tell it the partition's state).

- At most one change per partition is pending or in flight: ``submit`` returns False
  (and never calls the callback) while one is, as Kafka's ``Partition`` keeps one
  ``pendingState``.
- One request is in flight at a time; it carries every change pending when it is sent,
  so changes of many partitions go as one request (and one metadata-log batch).
- When this broker is the active controller, ``poll`` calls ``Controller.alter_partition``
  directly, then ``on_metadata_change()`` so the broker applies the image it published,
  then the callbacks. Otherwise it sends an AlterPartition request (v3, topics by id)
  through the broker's ``ControllerChannel`` to the controller the metadata names. An
  answer NOT_CONTROLLER, a connection that is lost (the controller died, resigned or moved)
  or a controller that cannot be reached puts the changes back, to be sent again after a
  backoff to whichever controller the metadata names then: ``retry_backoff`` seconds,
  doubled after each failure in a row up to ``RETRY_BACKOFF_MAX`` (Kafka's
  ``retry.backoff.ms`` and ``retry.backoff.max.ms``), so a controller broker that does
  not accept connections (each attempt may block the loop for the channel's connect
  timeout) is not tried at every turn. Sending a
  change again is safe: a change already applied comes back INVALID_UPDATE_VERSION or, if
  the ISR is what it asked for, succeeds with the same state.

Owner: the broker's loop thread: ``submit`` and ``poll`` are called from it, and the
callbacks run on it.
"""
from __future__ import annotations

import logging
from typing import NamedTuple

from cluster.errors import NotControllerError, UnknownTopicOrPartitionError
from cluster.metadata import data_dir as dd
from cluster.metadata.model import PartitionState
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.controller.controller import IsrChange

log = logging.getLogger(__name__)

RETRY_BACKOFF = 0.1
"""Seconds before changes that found no controller are sent again (Kafka's
``retry.backoff.ms`` default, 100)."""

RETRY_BACKOFF_MAX = 1.0
"""Longest backoff after failures in a row (Kafka's ``retry.backoff.max.ms``, 1000)."""

_VERSION = protocol.SUPPORTED_VERSIONS[ApiKey.ALTER_PARTITION][1]
_NO_BROKER_EPOCH = -1


class _Pending(NamedTuple):
    change: IsrChange
    callback: object


class AlterPartitionManager:
    """Broker ``broker_id``'s ISR changes (see the module doc). ``metadata``: the broker's
    BrokerMetadata (``image``); ``controller``: its Controller or None; ``channel``: its
    ControllerChannel; ``on_metadata_change()``: apply the newest image; ``clock``:
    monotonic seconds."""

    def __init__(self, broker_id, metadata, controller, channel, on_metadata_change, clock,
                 retry_backoff=RETRY_BACKOFF):
        self.broker_id = broker_id
        self._metadata = metadata
        self._controller = controller
        self._channel = channel
        self._on_metadata_change = on_metadata_change
        self._clock = clock
        self._retry_backoff = retry_backoff
        self._pending = {}  # (topic, index) -> _Pending, not sent yet
        self._in_flight = {}  # (topic, index) -> _Pending, in the request in flight
        self._answers = []  # (response or None, changes of the request it answers)
        self._next_send = float("-inf")
        self._failures = 0  # failed sends in a row

    def submit(self, topic, index, leader_epoch, partition_epoch, new_isr, callback):
        """Ask for ``new_isr`` of ``topic``-``index``; False if a change of it is already
        pending or in flight (nothing is sent, the callback is not called)."""
        key = (topic, index)
        if key in self._pending or key in self._in_flight:
            return False
        change = IsrChange(topic, index, leader_epoch, partition_epoch, tuple(new_isr))
        self._pending[key] = _Pending(change, callback)
        return True

    @property
    def busy(self):
        """Whether a change is pending or in flight."""
        return bool(self._pending or self._in_flight)

    def poll(self):
        """Hand out the answers that arrived, then send what is pending. Never waits for an
        answer; connecting to a controller broker anew may take up to the channel's
        connect timeout."""
        answers, self._answers = self._answers, []
        for response, sent in answers:
            self._answered(response, sent)
        if not self._pending or self._in_flight or self._clock() < self._next_send:
            return
        controller = self._controller
        if controller is not None and controller.active:
            self._local(controller)
        else:
            self._remote()

    # -- sending ------------------------------------------------------------------------------

    def _local(self, controller):
        pending, self._pending = self._pending, {}
        self._failures = 0
        results = controller.alter_partition(self.broker_id,
                                             [p.change for p in pending.values()])
        if any(code == 0 for code, _ in results.values()):
            self._on_metadata_change()
        for key, item in pending.items():
            code, state = results[key]
            item.callback(code, state)

    def _remote(self):
        image = self._metadata.image
        topics = {}
        for key, item in list(self._pending.items()):
            info = image.topics.get(item.change.topic)
            topic_id = None if info is None else dd.uuid_of(info.topic_id)
            if topic_id is None:
                del self._pending[key]
                item.callback(UnknownTopicOrPartitionError.errno, None)
                continue
            topics.setdefault(topic_id, []).append(item.change)
        if not topics:
            return
        classes = protocol.request_module(ApiKey.ALTER_PARTITION, _VERSION)
        request = classes.AlterPartitionRequest(
            broker_id=self.broker_id, broker_epoch=_NO_BROKER_EPOCH,
            topics=tuple(classes.TopicData(topic_id=topic_id, partitions=tuple(
                classes.PartitionData(
                    partition_index=c.partition, leader_epoch=c.leader_epoch,
                    new_isr_with_epochs=tuple(
                        classes.BrokerState(broker_id=b, broker_epoch=_NO_BROKER_EPOCH)
                        for b in c.new_isr),
                    partition_epoch=c.partition_epoch) for c in changes))
                for topic_id, changes in topics.items()))
        sent = dict(self._pending)
        if self._channel.send(image.controller_id, request,
                              lambda response: self._answers.append((response, sent))):
            self._pending = {}
            self._in_flight = sent
        else:
            self._back_off()

    # -- answers ------------------------------------------------------------------------------

    def _answered(self, response, sent):
        if self._in_flight is sent:
            self._in_flight = {}
        if response is None or response.error_code == NotControllerError.errno:
            log.info("AlterPartition of %d partition(s) to be sent again: %s", len(sent),
                     "the connection to the controller was lost" if response is None
                     else "the broker was not the controller")
            self._requeue(sent)
            return
        self._failures = 0
        if response.error_code != 0:
            for item in sent.values():
                item.callback(int(response.error_code), None)
            return
        image = self._metadata.image
        names = {dd.uuid_of(t.topic_id): t.name for t in image.topics.values()}
        answered = set()
        for topic in response.topics:
            name = names.get(topic.topic_id)
            for p in topic.partitions:
                item = sent.get((name, p.partition_index))
                if item is None or (name, p.partition_index) in answered:
                    continue
                answered.add((name, p.partition_index))
                code = int(p.error_code)
                state = None
                if code == 0:
                    known = image.partition(name, p.partition_index)
                    state = PartitionState(name, p.partition_index, p.leader_id,
                                           p.leader_epoch,
                                           () if known is None else known.replicas,
                                           tuple(p.isr), p.partition_epoch)
                item.callback(code, state)
        for key, item in sent.items():
            if key not in answered:  # the topic went away while the request was out
                item.callback(UnknownTopicOrPartitionError.errno, None)

    def _requeue(self, sent):
        for key, item in sent.items():
            self._pending.setdefault(key, item)
        self._back_off()

    def _back_off(self):
        backoff = min(self._retry_backoff * 2 ** self._failures, RETRY_BACKOFF_MAX)
        self._failures += 1
        self._next_send = self._clock() + backoff
