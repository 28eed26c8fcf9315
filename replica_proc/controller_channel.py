"""The broker's channel to the controller broker: requests a broker sends the controller.

Three parts of a broker talk to the active controller when it is another broker:
auto-creation (a Metadata request naming a missing topic is forwarded as a CreateTopics
request, as Kafka forwards it), the leader's ISR changes (AlterPartition,
``alter_partition_manager``) and producer id blocks (AllocateProducerIds,
``producer_id_manager``). All send through the one ``ControllerChannel`` of the broker, an
``InterBrokerChannel`` (``inter_broker_channel``: ``send``, ``poll``, a lost connection
failing what is in flight) whose destination is the controller the metadata names: when
the controller moves, the connection to the old one is dropped and its requests fail.

``create_topics(controller_id, names, now, specs)`` is auto-creation's use (and the
creation of ``__consumer_offsets``, with its own partitions, replication and configs): a
name is sent at most once per ``retry_interval`` seconds, so a client polling Metadata does
not flood the controller; failures other than TOPIC_ALREADY_EXISTS (the usual race) are
logged.

Owner: the broker's loop thread.
"""
from __future__ import annotations

import datetime
import logging

from cluster.errors import TopicAlreadyExistsError
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.inter_broker_channel import InterBrokerChannel
from shm_ring import connect

log = logging.getLogger(__name__)

RETRY_INTERVAL = 1.0
"""Seconds before the same topic name is forwarded again."""

REQUEST_TIMEOUT = datetime.timedelta(seconds=30)
_CREATE_TOPICS_VERSION = protocol.SUPPORTED_VERSIONS[ApiKey.CREATE_TOPICS][1]


class ControllerChannel(InterBrokerChannel):
    """Broker ``broker_id``'s channel to the controller broker (see the module doc)."""

    def __init__(self, cluster_id, broker_id, *, connector=connect,
                 retry_interval=RETRY_INTERVAL):
        super().__init__(cluster_id, broker_id, connector=connector, peer="controller")
        self._retry_interval = retry_interval
        self._sent = {}  # topic name -> when it was last forwarded

    @property
    def controller_id(self):
        """The controller the connection is to, or None while there is none."""
        return self.destination

    # -- auto-creation --------------------------------------------------------------------------

    def create_topics(self, controller_id, names, now, specs=None):
        """Forward a CreateTopics of ``names`` to broker ``controller_id``; ``now`` in
        seconds (monotonic). ``specs``: {name: (num_partitions, replication_factor,
        {config: value})} for the names not created with the broker defaults."""
        specs = specs or {}
        retry = self._retry_interval
        self._sent = {n: when for n, when in self._sent.items() if now - when < retry}
        names = [n for n in names if n not in self._sent]
        if not names:
            return
        classes = protocol.request_module(ApiKey.CREATE_TOPICS, _CREATE_TOPICS_VERSION)
        request = classes.CreateTopicsRequest(
            topics=tuple(_creatable(classes, n, *specs.get(n, (-1, -1, {})))
                         for n in names),
            timeout=REQUEST_TIMEOUT, validate_only=False)
        if self.send(controller_id, request, self._created):
            for name in names:
                self._sent[name] = now
            log.info("asked controller %d to create %s", controller_id, names)

    def _created(self, response):
        if response is None:
            return  # the connection was lost; the next Metadata request forwards again
        for result in response.topics:
            if result.error_code not in (0, TopicAlreadyExistsError.errno):
                log.warning("controller %d did not create topic %r: %s (%s)",
                            self._destination, result.name, result.error_code.name,
                            result.error_message)


def _creatable(classes, name, num_partitions, replication_factor, configs):
    return classes.CreatableTopic(
        name=name, num_partitions=num_partitions, replication_factor=replication_factor,
        assignments=(), configs=tuple(classes.CreatableTopicConfig(name=k, value=v)
                                      for k, v in configs.items()))
