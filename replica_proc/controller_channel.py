"""CreateTopics forwarded to the controller broker, for auto-created topics.

A Metadata request may ask a broker that is not the active controller to create topics;
as Kafka does, the broker forwards a CreateTopics request to the controller and answers
the client at once (LEADER_NOT_AVAILABLE; the client asks again). This is the broker's
client connection to the controller broker for that: ``create_topics`` sends without
waiting (a name is sent at most once per ``retry_interval`` seconds, so a client polling
Metadata does not flood the controller), ``poll`` reads whatever answers arrived and logs
the failures (TOPIC_ALREADY_EXISTS is the usual race and not logged). A controller broker
that died or closed is dropped; the next send connects again, to whichever broker the
metadata names then.

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
_VERSION = protocol.SUPPORTED_VERSIONS[ApiKey.CREATE_TOPICS][1]


class ControllerChannel:
    """Broker ``broker_id``'s connection to the controller broker (see the module doc)."""

    def __init__(self, cluster_id, broker_id, *, connector=connect,
                 retry_interval=RETRY_INTERVAL):
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self._connect = connector
        self._retry_interval = retry_interval
        self._conn = None
        self._controller_id = None
        self._correlation_id = 0
        self._in_flight = {}  # correlation id -> topic names
        self._sent = {}  # topic name -> when it was last forwarded

    def create_topics(self, controller_id, names, now):
        """Forward a CreateTopics of ``names`` (broker defaults for partitions and
        replication) to broker ``controller_id``; ``now`` in seconds (monotonic)."""
        retry = self._retry_interval
        self._sent = {n: when for n, when in self._sent.items() if now - when < retry}
        names = [n for n in names if n not in self._sent]
        if not names or controller_id < 0 or controller_id == self.broker_id:
            return
        conn = self._connection(controller_id)
        if conn is None:
            return
        classes = protocol.request_module(ApiKey.CREATE_TOPICS, _VERSION)
        request = classes.CreateTopicsRequest(
            topics=tuple(classes.CreatableTopic(name=n, num_partitions=-1,
                                                replication_factor=-1, assignments=(),
                                                configs=()) for n in names),
            timeout=REQUEST_TIMEOUT, validate_only=False)
        self._correlation_id += 1
        frame = protocol.encode_request(request, self._correlation_id,
                                        f"broker-{self.broker_id}")
        try:
            sent = conn.send(frame, timeout=0)
        except (PeerDiedError, PeerClosedError) as exc:
            self._drop(exc)
            return
        if sent:
            self._in_flight[self._correlation_id] = names
            for name in names:
                self._sent[name] = now
            log.info("asked controller %d to create %s", controller_id, names)

    def _connection(self, controller_id):
        if self._conn is not None and self._controller_id != controller_id:
            self._drop("the controller moved")
        if self._conn is None:
            try:
                self._conn = self._connect(self.cluster_id, controller_id,
                                           timeout=CONNECT_TIMEOUT, capacity=CAPACITY)
            except (ConnectionError, TimeoutError) as exc:
                log.warning("cannot reach controller %d to create topics: %s", controller_id,
                            exc)
                return None
            self._controller_id = controller_id
        return self._conn

    def poll(self):
        """Read the answers that arrived (never waits)."""
        conn = self._conn
        if conn is None or not self._in_flight:
            return
        try:
            while (frame := conn.recv(timeout=0)) is not None:
                try:
                    correlation_id, response = protocol.decode_response(
                        frame, ApiKey.CREATE_TOPICS, _VERSION)
                finally:
                    del frame
                    conn.release()
                self._in_flight.pop(correlation_id, None)
                for result in response.topics:
                    if result.error_code not in (0, TopicAlreadyExistsError.errno):
                        log.warning("controller %d did not create topic %r: %s (%s)",
                                    self._controller_id, result.name, result.error_code.name,
                                    result.error_message)
        except (PeerDiedError, PeerClosedError, KafkaProtocolError) as exc:
            self._drop(exc)

    def _drop(self, reason):
        log.info("dropping the connection to controller %s: %s", self._controller_id, reason)
        self._in_flight.clear()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def close(self):
        """Close the connection (unlinking its rings); safe to call twice."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._in_flight.clear()
