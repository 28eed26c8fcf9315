"""The transaction coordinator's WriteTxnMarkers sender (Kafka's
``TransactionMarkerChannelManager``): carries ``TxnMarker``s to the leaders of their
partitions and reports the leaders' per-partition error codes back.

``send(markers, on_done)`` routes the markers by the leaders of the current metadata image
(``results.route``) and calls ``on_done(marker, {partition: code}, gone)`` once per marker
part, when its leader answered:

- a part whose leader is this broker is appended directly
  (``WriteTxnMarkersHandler.write``, the handler other brokers' requests reach), answered
  once replicated;
- a part for another broker goes as one WriteTxnMarkers v1 request per destination broker
  per ``send``, through a connection of its own to each destination
  (an ``inter_broker_channel.InterBrokerChannel``, made with ``connector``: the broker gives
  ``shm_ring.connect(waker=listener)`` so that answers ring its doorbell; None, in tests
  without one, fails such parts as below; one attempt, never waiting for a broker that
  does not listen); a request that
  cannot be sent, or whose connection is lost before the answer, reports every partition
  NOT_LEADER_OR_FOLLOWER (the coordinator sends it again after its backoff);
- after a failed connection attempt to a broker, no other is made before its reconnect
  back-off (``cluster.client.reconnect_backoff``: 50 ms doubling to 1 s, jittered, as
  Kafka's clients' reconnect.backoff.ms and reconnect.backoff.max.ms; reset once
  connected), so a dead leader the metadata still names costs one attempt per back-off,
  not one per coordinator retry; meanwhile its parts fail at once as above;
- a part without a live leader reports no code (the coordinator sends it again later); a
  part of a partition that no longer exists is reported ``gone``.

``poll()`` (the broker loop) reads the answers that arrived; ``close()`` closes the
connections (unlinking their rings).

Owner: the broker's loop thread.
"""
from __future__ import annotations

import time

from cluster.client.reconnect_backoff import ReconnectBackoff
from cluster.errors import NotLeaderForPartitionError
from replica_proc.inter_broker_channel import InterBrokerChannel
from replica_proc.transaction_coordinator import marker_requests
from replica_proc.transaction_coordinator.results import route
from replica_proc.txn_markers_handler import response

#: Kafka's client defaults of reconnect.backoff.ms and reconnect.backoff.max.ms, in seconds.
RECONNECT_BACKOFF = 0.05
RECONNECT_BACKOFF_MAX = 1.0


class TxnMarkerSender:
    """Broker ``broker_id``'s marker sender (module doc). ``metadata``: the BrokerMetadata;
    ``local``: this broker's WriteTxnMarkersHandler; ``clock``: monotonic seconds (the
    loop's) and ``rng`` (a ``random.Random``, for the jitter) of the reconnect back-off."""

    def __init__(self, cluster_id, broker_id, metadata, local, connector=None,
                 clock=time.monotonic, rng=None):
        self._cluster_id = cluster_id
        self._broker_id = broker_id
        self._metadata = metadata
        self._local = local
        self._connector = connector
        self._channels = {}  # destination broker id -> InterBrokerChannel
        self.reconnect = ReconnectBackoff(RECONNECT_BACKOFF, RECONNECT_BACKOFF_MAX, clock, rng)

    def leader_of(self, topic, partition):
        """``results.route``'s ``leader_of``: the live leader's id, -1, or None."""
        image = self._metadata.image
        info = image.topics.get(topic)
        if info is None or not 0 <= partition < len(info.partitions):
            return None
        state = info.partitions[partition]
        broker = image.brokers.get(state.leader)
        if not state.online or broker is None or not broker.alive:
            return -1
        return state.leader

    def send(self, markers, on_done):
        """Send ``markers`` (module doc)."""
        routes = route(markers, self.leader_of)
        for marker in routes.gone:
            on_done(marker, {}, marker.partitions)
        for marker in routes.waiting:
            on_done(marker, {}, ())
        for leader, parts in routes.by_leader.items():
            request = marker_requests.markers_request(parts)

            def answered(answer, parts=parts):
                if answer is None:
                    results = marker_requests.failed(parts, NotLeaderForPartitionError.errno)
                else:
                    results = marker_requests.marker_errors(parts, answer)
                for marker, codes in results:
                    on_done(marker, codes, ())

            if leader == self._broker_id:
                self._local.write(request, lambda answers, done=answered:
                                  done(response(answers)))
            elif (self._connector is None or not self._may_send(leader)
                  or not self._channel(leader).send(leader, request, answered)):
                answered(None)

    def _may_send(self, broker_id):
        """Connected to ``broker_id``, or out of its reconnect back-off."""
        channel = self._channels.get(broker_id)
        return (channel is not None and channel.connected) or \
            self.reconnect.ready(broker_id)

    def _channel(self, broker_id):
        channel = self._channels.get(broker_id)
        if channel is None:
            channel = self._channels[broker_id] = InterBrokerChannel(
                self._cluster_id, self._broker_id, connector=self._connect_now,
                peer="partition leader", connect_timeout=0)
        return channel

    def _connect_now(self, cluster_id, broker_id, timeout, capacity):
        """One attempt, never waiting (the channel's timeout is 0): the loop must not
        stall on a dead leader the metadata still names; the marker is retried after the
        coordinator's backoff, the connection after the reconnect back-off."""
        try:
            conn = self._connector(cluster_id, broker_id, timeout=timeout, capacity=capacity)
        except (ConnectionError, TimeoutError) as exc:
            wait = self.reconnect.failed(broker_id)
            raise ConnectionError(f"{exc}; next attempt in {wait * 1000:.0f} ms") from exc
        self.reconnect.connected(broker_id)
        return conn

    def poll(self):
        """Hand out the answers that arrived (never waits)."""
        for channel in list(self._channels.values()):
            channel.poll()

    def close(self):
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
