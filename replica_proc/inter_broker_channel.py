"""The broker-to-broker channel: requests this broker sends another broker, answers read
back without waiting.

Every request one broker makes of another goes through an ``InterBrokerChannel``:

- ``ControllerChannel`` (``controller_channel``, Kafka's NodeToControllerChannelManager):
  AlterPartition, AllocateProducerIds and forwarded CreateTopics to the active controller;
- the transaction coordinator's ``TxnMarkerSender`` (Kafka's
  TransactionMarkerChannelManager): one channel per partition leader it sends
  WriteTxnMarkers to;
- the follower's ``ReplicaFetcher`` (Kafka's ReplicaFetcherThread and its BrokerBlockingSender,
  here never blocking): one channel per leader it fetches from (Fetch, OffsetsForLeaderEpoch).

The channel:

- ``send(destination, request, on_answer)`` sends a kio request to broker ``destination``
  (``send_frame``: a request the caller encoded itself, the follower's Fetch) without
  waiting, connecting first (``connector(cluster_id, destination, timeout=...,
  capacity=...)``, ``shm_ring.connect`` or a partial of it with the waker and wait
  policy), or again after the destination changed (the controller moved) or the
  connection was lost; False when it could not be sent now (nobody listening, the
  request ring full): the caller tries again later, ``connected`` telling the two apart;
- ``poll()`` (from the broker loop) reads the answers that arrived and calls each request's
  ``on_answer(response)`` once, matched by correlation id (``protocol.next_correlation_id``:
  it wraps within the int32, so a channel open for days keeps working); with requests in
  flight it also looks whether the other broker is gone (``check``: ``recv(timeout=0)``
  never looks), so a request to a broker that died fails instead of waiting forever;
- when the connection is lost (the other broker died or closed, an answer that does not
  decode or that no request in flight has, ``drop(reason)``) every request in flight gets
  ``on_answer(None)``: it may or may not have been applied, and the caller decides whether
  to send it again.

Owner: the broker's loop thread, the only caller. The connection's rings are this
process's: ``close`` (or the lost connection) unlinks them.
"""
from __future__ import annotations

import logging

from cluster.errors import KafkaProtocolError
from cluster.protocol import frames as protocol
from shm_ring import PeerClosedError, PeerDiedError, connect

log = logging.getLogger(__name__)

CAPACITY = 1 << 16
"""Data bytes of each ring of a connection, unless the user says otherwise (the controller's
and the markers' requests and answers are small)."""

CONNECT_TIMEOUT = 1.0
"""Seconds to wait for the other broker to accept the connection, unless the user says
otherwise."""


class InterBrokerChannel:
    """Broker ``broker_id``'s connection to one other broker at a time (module doc).
    ``peer``: what the other broker is, in log lines; ``client_id``: the requests' client
    id (``broker-<id>`` by default); ``unreachable_level``: the log level of a refused
    connect (a follower expects some while the cluster starts)."""

    def __init__(self, cluster_id, broker_id, *, connector=connect, peer="broker",
                 client_id=None, capacity=CAPACITY, connect_timeout=CONNECT_TIMEOUT,
                 unreachable_level=logging.WARNING):
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self._connect = connector
        self._peer = peer
        self._client_id = client_id or f"broker-{broker_id}"
        self._capacity = capacity
        self._connect_timeout = connect_timeout
        self._unreachable_level = unreachable_level
        self._conn = None
        self._destination = None
        self._correlation_id = 0
        self._in_flight = {}  # correlation id -> (api key, version, on_answer)

    def __repr__(self):
        return (f"InterBrokerChannel(broker {self.broker_id} -> {self._peer} "
                f"{self.destination}, {len(self._in_flight)} in flight)")

    @property
    def destination(self):
        """The broker the connection is to, or None while there is none."""
        return self._destination if self._conn is not None else None

    @property
    def connected(self):
        return self._conn is not None

    @property
    def in_flight(self):
        """How many requests wait for their answer."""
        return len(self._in_flight)

    @property
    def client_id(self):
        """The client id of this channel's requests."""
        return self._client_id

    def send(self, destination, request, on_answer):
        """Send ``request`` (a kio request) to broker ``destination``; True if sent, and
        ``poll()`` calls ``on_answer(response or None)`` once. Never waits for the answer."""
        client_id = self._client_id
        return self.send_frame(
            destination, request.__api_key__, request.__version__,
            lambda correlation_id: protocol.encode_request(request, correlation_id,
                                                           client_id),
            on_answer)

    def send_frame(self, destination, api_key, version, encode, on_answer):
        """``send`` for a request the caller encodes: ``encode(correlation_id)`` returns
        its frame (with this channel's ``client_id``), copied into the ring before this
        returns; the answer is decoded as ``api_key`` at ``version``."""
        if destination < 0 or destination == self.broker_id:
            return False
        conn = self._connection(destination)
        if conn is None:
            return False
        correlation_id = protocol.next_correlation_id(self._correlation_id)
        self._correlation_id = correlation_id
        frame = encode(correlation_id)
        try:
            sent = conn.send(frame, timeout=0)
        except (PeerDiedError, PeerClosedError) as exc:
            self.drop(exc)
            return False
        if sent:
            self._in_flight[correlation_id] = (api_key, version, on_answer)
        return sent

    def _connection(self, destination):
        if self._conn is not None and self._destination != destination:
            self.drop(f"the {self._peer} moved to broker {destination}")
        if self._conn is None:
            try:
                self._conn = self._connect(self.cluster_id, destination,
                                           timeout=self._connect_timeout,
                                           capacity=self._capacity)
            except (ConnectionError, TimeoutError) as exc:
                log.log(self._unreachable_level, "broker %d cannot reach %s %d: %s",
                        self.broker_id, self._peer, destination, exc)
                return None
            self._destination = destination
            log.info("broker %d connected to %s %d over %s", self.broker_id, self._peer,
                     destination, self._conn.name)
        return self._conn

    def poll(self):
        """Read the answers that arrived and hand them out (module doc; never waits)."""
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
                if self._conn is not conn:
                    return  # on_answer dropped or replaced the connection
        except (PeerDiedError, PeerClosedError, KafkaProtocolError) as exc:
            self.drop(exc)

    def drop(self, reason):
        """Close the connection (unlinking its rings) and fail every request in flight
        (``on_answer(None)``); the next ``send`` connects again."""
        log.info("broker %d dropping its connection to %s %s: %s", self.broker_id,
                 self._peer, self._destination, reason)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        in_flight, self._in_flight = self._in_flight, {}
        for _, _, on_answer in in_flight.values():
            on_answer(None)

    def close(self):
        """Close the connection (unlinking its rings); safe to call twice. Requests in
        flight are not answered."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        self._in_flight.clear()
