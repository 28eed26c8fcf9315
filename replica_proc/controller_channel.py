"""The broker's connection to the controller broker: requests a broker sends the controller.

Two parts of a broker talk to the active controller when it is another broker: auto-creation
(a Metadata request naming a missing topic is forwarded as a CreateTopics request, as
Kafka forwards it) and the leader's ISR changes (AlterPartition, ``alter_partition_manager``).
Both send through the one ``ControllerChannel`` of the broker:

- ``send(controller_id, request, on_answer)`` sends a kio request to broker
  ``controller_id`` without waiting (connecting first, or again if the controller moved);
  False when it could not be sent now (no such broker listening, the ring full): the caller
  tries again later;
- ``poll()`` (from the broker loop) reads the answers that arrived and calls each request's
  ``on_answer(response)``; when the connection is lost (the controller broker died or
  closed, the controller moved, an answer that does not decode) every request in flight
  gets ``on_answer(None)``: it may or may not have been applied, and the caller decides
  whether to send it again. A broker that died is noticed by ``poll`` within the
  connection's poll interval, answer or not.

``create_topics(controller_id, names, now, specs)`` is auto-creation's use (and the
creation of ``__consumer_offsets``, with its own partitions, replication and configs): a
name is sent at most once per ``retry_interval`` seconds, so a client polling Metadata does
not flood the controller; failures other than TOPIC_ALREADY_EXISTS (the usual race) are
logged.

Owner: the broker's loop thread. The connection's rings are this process's (it unlinks
them in ``close`` or when the controller broker goes away).
"""
from __future__ import annotations

import datetime
import logging

from cluster.errors import KafkaProtocolError, TopicAlreadyExistsError
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from shm_ring import PeerClosedError, PeerDiedError, connect

log = logging.getLogger(__name__)

CAPACITY = 1 << 16
"""Data bytes of each ring of the connection (requests and answers are small)."""

CONNECT_TIMEOUT = 1.0
"""Seconds to wait for the controller broker to accept the connection."""

RETRY_INTERVAL = 1.0
"""Seconds before the same topic name is forwarded again."""

REQUEST_TIMEOUT = datetime.timedelta(seconds=30)
_CREATE_TOPICS_VERSION = protocol.SUPPORTED_VERSIONS[ApiKey.CREATE_TOPICS][1]


class ControllerChannel:
    """Broker ``broker_id``'s connection to the controller broker (see the module doc)."""

    def __init__(self, cluster_id, broker_id, *, connector=connect,
                 retry_interval=RETRY_INTERVAL, peer="controller"):
        self.cluster_id = cluster_id
        self._peer = peer  # what the other broker is, in log lines
        self.broker_id = broker_id
        self._connect = connector
        self._retry_interval = retry_interval
        self._conn = None
        self._controller_id = None
        self._correlation_id = 0
        self._in_flight = {}  # correlation id -> (api key, version, on_answer)
        self._sent = {}  # topic name -> when it was last forwarded

    @property
    def controller_id(self):
        """The broker the connection is to, or None while there is none."""
        return self._controller_id if self._conn is not None else None

    # -- any request ----------------------------------------------------------------------------

    def send(self, controller_id, request, on_answer):
        """Send ``request`` (a kio request) to broker ``controller_id``; True if sent, and
        ``poll()`` calls ``on_answer(response or None)`` once. Never waits for the answer."""
        if controller_id < 0 or controller_id == self.broker_id:
            return False
        conn = self._connection(controller_id)
        if conn is None:
            return False
        self._correlation_id = protocol.next_correlation_id(self._correlation_id)
        frame = protocol.encode_request(request, self._correlation_id,
                                        f"broker-{self.broker_id}")
        try:
            sent = conn.send(frame, timeout=0)
        except (PeerDiedError, PeerClosedError) as exc:
            self._drop(exc)
            return False
        if sent:
            self._in_flight[self._correlation_id] = (
                request.__api_key__, request.__version__, on_answer)
        return sent

    def _connection(self, controller_id):
        if self._conn is not None and self._controller_id != controller_id:
            self._drop(f"the controller moved to broker {controller_id}")
        if self._conn is None:
            try:
                self._conn = self._connect(self.cluster_id, controller_id,
                                           timeout=CONNECT_TIMEOUT, capacity=CAPACITY)
            except (ConnectionError, TimeoutError) as exc:
                log.warning("cannot reach %s %d: %s", self._peer, controller_id, exc)
                return None
            self._controller_id = controller_id
        return self._conn

    def poll(self):
        """Read the answers that arrived and hand them out (never waits). With requests in
        flight it also looks whether the other broker is gone (``check``: recv(timeout=0)
        never looks), so a request to a broker that died fails instead of waiting forever."""
        conn = self._conn
        if conn is None or not self._in_flight:
            return
        try:
            conn.check()
            while (frame := conn.recv(timeout=0)) is not None:
                try:
                    correlation_id = protocol.response_correlation_id(frame)
                    entry = self._in_flight.pop(correlation_id, None)
                    if entry is None:
                        raise KafkaProtocolError(
                            f"an answer with correlation id {correlation_id}, which no "
                            f"request in flight has")
                    api_key, version, on_answer = entry
                    _, response = protocol.decode_response(frame, api_key, version)
                finally:
                    del frame
                    conn.release()
                on_answer(response)
        except (PeerDiedError, PeerClosedError, KafkaProtocolError) as exc:
            self._drop(exc)

    def _drop(self, reason):
        log.info("dropping the connection to %s %s: %s", self._peer, self._controller_id,
                 reason)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        self._fail_in_flight()

    def _fail_in_flight(self):
        in_flight, self._in_flight = self._in_flight, {}
        for _, _, on_answer in in_flight.values():
            on_answer(None)

    def close(self):
        """Close the connection (unlinking its rings); safe to call twice. Requests in
        flight are not answered."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._in_flight.clear()

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
                            self._controller_id, result.name, result.error_code.name,
                            result.error_message)


def _creatable(classes, name, num_partitions, replication_factor, configs):
    return classes.CreatableTopic(
        name=name, num_partitions=num_partitions, replication_factor=replication_factor,
        assignments=(), configs=tuple(classes.CreatableTopicConfig(name=k, value=v)
                                      for k, v in configs.items()))
