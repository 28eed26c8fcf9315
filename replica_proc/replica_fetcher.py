"""Follower replication: fetching from the leaders, driven by the broker's loop.

Kafka's ReplicaFetcherManager / ReplicaFetcherThread, without threads: the loop owns every
log, so ``ReplicaFetcherManager.poll(now)`` runs once per turn of the loop and never blocks.

Who fetches what. The manager follows the ReplicaManager's image: every open partition
whose leader is another broker the image counts alive is fetched by the ``ReplicaFetcher``
of that leader — one per leader broker, one ``InterBrokerChannel`` each (an outbound
connection made with ``shm_ring.connect(waker=listener)``: a response rings this broker's
own doorbell, so the loop wakes as soon as it arrives, with no polling floor), many
partitions per Fetch request. A partition this broker now leads, no longer hosts, whose
leader is gone, or whose log went offline is removed from its fetcher; a fetcher left
without partitions closes its connection (unlinking its rings).

Per partition, Kafka's fetch states: a partition added (or whose leader or leader epoch
changed) starts **Truncating**: before fetching from a new leader the follower drops what
the leader may not have. Two ways:

- the epoch-based rule (KIP-101/KIP-279), when the manager was given an
  ``EpochTruncation`` (``truncation``: the decision over the partition's leader-epoch
  cache; the broker always gives one): the epoch it
  names (the latest this replica has) goes to the leader in one OffsetsForLeaderEpoch v3
  request for every such partition of the fetcher (in the one-request-in-flight slot,
  before any Fetch); the leader's ``(leader_epoch, end_offset)`` goes back to it, and the
  partition truncates where it says — and asks again about an older epoch if it says so,
  else starts Fetching. An error answer backs off (FENCED_LEADER_EPOCH: fenced, as below);
- otherwise (no epoch known, or either piece missing) Kafka's pre-KIP-101 rule: truncate to
  the high watermark.

Then **Fetching**: one Fetch v11 in flight per
fetcher (``replica_id`` = this broker, ``max_wait`` = ``replica.fetch.wait.max.ms``,
``min_bytes`` = ``replica.fetch.min.bytes``, ``max_bytes`` =
``replica.fetch.response.max.bytes``; per partition ``fetch_offset`` = the log end offset,
``current_leader_epoch`` = the epoch this broker knows, ``partition_max_bytes`` =
``replica.fetch.max.bytes``, ``log_start_offset``). The next request goes out as soon as
the answer to the previous one was handled; the leader long-polls it. The request is
encoded once for the partitions fetched and patched for each send
(``cluster.protocol.fetch_frame``: the correlation id and each partition's offsets and
epoch).

The answer, per partition (Kafka's AbstractFetcherThread.processFetchRequest):

- records: ``Partition.append_as_follower`` (validated, the leader's offsets and epochs
  kept; the log's flush policy applied), then the follower's high watermark =
  min(the leader's, its own log end offset), never moving back, then its log start
  offset up to the leader's (not past its high watermark);
- OFFSET_OUT_OF_RANGE (Kafka's fetchOffsetAndTruncate): behind the leader's log start, the
  log restarts empty there;
  otherwise the follower is ahead of the leader's log end, and truncates to the leader's
  high watermark (the answer does not carry the leader's log end offset; its high
  watermark is at most that, and what is dropped in between is fetched again);

Neither truncation goes below the follower's own high watermark unless
``Partition.may_truncate_to`` allows it (a damaged replica, unclean leader election): a
leader that would need that lost acknowledged records; the partition goes back to
Truncating after the back-off instead, until the controller names an intact leader.
- FENCED_LEADER_EPOCH: this broker's epoch is older than the leader's; the partition stops
  until the image gives it another leader or epoch (Kafka's onPartitionFenced);
- NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_LEADER_EPOCH and every other
  error: the partition backs off ``replica.fetch.backoff.ms`` and is fetched again, as
  Kafka does. All brokers read one metadata page but apply it each at its own loop's
  pace, so the usual cause is a leader that has not applied the image this broker
  already did (the topic's creation, the leader change): waiting for this broker's image
  to move again instead could stall the partition for good;
- a storage error on this broker's log: a log that went offline (``PartitionLog.offline``)
  is no longer fetched (it stays offline until a restart, as a leader's would); a write
  that failed and was undone (a full disk) backs off and is retried.

A leader broker that dies or closes (PeerDiedError / PeerClosedError, or the connect
refused) drops the connection: its partitions back off, and the next request connects
again if the image still names that leader alive.

Owner: the broker's loop thread, the only caller.
"""
from __future__ import annotations

import enum
import functools
import logging

from cluster.errors import FencedLeaderEpochError, KafkaStorageError, OffsetOutOfRangeError
from cluster.protocol import frames as protocol
from cluster.protocol.fetch_frame import FetchFrame
from cluster.protocol.frames import ApiKey
from replica_proc.inter_broker_channel import InterBrokerChannel
from segments.errors import StorageError
from shm_ring import connect

log = logging.getLogger(__name__)

FETCH_VERSION = 11
"""Fetch's highest non-flexible version (no fetch sessions used: session_epoch -1)."""

OFFSETS_FOR_LEADER_EPOCH = ApiKey.OFFSET_FOR_LEADER_EPOCH

EPOCH_VERSION = 3
"""OffsetsForLeaderEpoch's highest non-flexible version (replica_id since v3)."""


_FENCED = frozenset({FencedLeaderEpochError.errno})


class FetchState(enum.Enum):
    """Kafka's per-partition fetch states (``ReplicaState``)."""

    TRUNCATING = "truncating"
    """Added, or the leader changed: truncate before the first fetch."""
    FETCHING = "fetching"
    """Fetching from ``fetch_offset`` (the log end offset)."""
    FENCED = "fenced"
    """Refused by the leader for an older view; waits for the image to move."""


class PartitionFetch:
    """One partition's place in a fetcher: its Partition, the leader epoch it follows, its
    state, when it may be fetched again after an error (monotonic seconds), and while
    Truncating by epochs the epoch to ask the leader about (None: not asking)."""

    __slots__ = ("partition", "leader_epoch", "state", "not_before", "ask_epoch")

    def __init__(self, partition, leader_epoch):
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.state = FetchState.TRUNCATING
        self.not_before = 0.0
        self.ask_epoch = None

    @property
    def sendable(self):
        """Waits for a request: Fetching, or Truncating with an epoch to ask about."""
        return self.state is FetchState.FETCHING or self.ask_epoch is not None

    def __repr__(self):
        p = self.partition
        return (f"PartitionFetch({p.topic}-{p.index}, epoch {self.leader_epoch}, "
                f"{self.state.value}, leo {p.log.log_end_offset})")


class ReplicaFetcher:
    """The fetches of broker ``broker_id`` from leader broker ``leader_id`` (module doc).

    ``connector(cluster_id, broker_id, timeout=..., capacity=..., policy=..., waker=...)``
    opens the outbound connection of its ``channel`` (``shm_ring.connect``); ``settings``
    is the manager's ``FetchSettings``; ``epoch_truncation`` the manager's (see
    ``ReplicaFetcherManager``).
    """

    def __init__(self, cluster_id, broker_id, leader_id, settings, connector, waker,
                 epoch_truncation=None):
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self.leader_id = leader_id
        self._settings = settings
        self.channel = InterBrokerChannel(
            cluster_id, broker_id, peer="leader",
            connector=functools.partial(connector, policy=settings.policy, waker=waker),
            client_id=f"broker-{broker_id}-replica-fetcher-{leader_id}",
            capacity=settings.ring_bytes, connect_timeout=0,
            unreachable_level=logging.INFO)
        self.partitions = {}  # (topic, index) -> PartitionFetch
        self._not_before = 0.0  # no connect before this (after a refused or lost one)
        self._now = 0.0  # the time of the turn (poll or restart) under way
        self._epoch_truncation = epoch_truncation
        # {key: (PartitionFetch, fetch offset or asked epoch)} of the request in flight
        self._in_flight = None
        self._frame = None  # FetchFrame of this fetcher's requests (made at the first send)

    def __repr__(self):
        return (f"ReplicaFetcher(broker {self.broker_id} <- {self.leader_id}, "
                f"{len(self.partitions)} partition(s))")

    @property
    def connected(self):
        return self.channel.connected

    # -- membership ---------------------------------------------------------------------------

    def add(self, partition):
        """Fetch ``partition`` (at its current leader epoch), starting Truncating."""
        self.partitions[(partition.topic, partition.index)] = PartitionFetch(
            partition, partition.leader_epoch)

    def remove(self, key):
        """Stop fetching ``key`` (an answer still in flight for it is ignored)."""
        self.partitions.pop(key, None)

    # -- the loop's turn ----------------------------------------------------------------------

    def poll(self, now):
        """Handle an answer that arrived, truncate what must be, send the next request."""
        self._now = now
        self.channel.poll()  # the answer, or a lost connection, goes to _answered
        for fetch in list(self.partitions.values()):
            if fetch.state is FetchState.TRUNCATING:
                self._truncate(fetch, now)
        if self._in_flight is None:
            self._send(now)

    def next_deadline(self):
        """When a partition's back-off (or a refused connect's) ends, if that matters now:
        None while a request is in flight (its answer rings the doorbell)."""
        if self._in_flight is not None:
            return None
        waiting = [f.not_before for f in self.partitions.values() if f.sendable]
        if not waiting:
            return None
        return max(min(waiting), self._not_before)

    def close(self):
        """Close the connection (unlinking its rings); safe to call twice."""
        self._in_flight = None
        self.channel.close()

    # -- truncation ---------------------------------------------------------------------------

    def _truncate(self, fetch, now):
        """Truncating -> Fetching: drop what the new leader may not have (module doc); or,
        by epochs, name the epoch to ask the leader about."""
        partition = fetch.partition
        if fetch.ask_epoch is not None:
            return  # asking the leader
        if self._epoch_truncation is not None:
            fetch.ask_epoch = self._epoch_truncation.epoch_to_ask(partition)
            if fetch.ask_epoch is not None:
                return
        try:
            dropped = partition.truncate_to_high_watermark()
        except StorageError as exc:
            self._storage_failed(fetch, exc, now)
            return
        if dropped:
            log.info("%s-%d: truncated %d bytes to the high watermark %d before fetching "
                     "from leader %d (epoch %d)", partition.topic, partition.index, dropped,
                     partition.high_watermark, self.leader_id, fetch.leader_epoch)
        fetch.state = FetchState.FETCHING

    # -- sending ------------------------------------------------------------------------------

    def _send(self, now):
        if now < self._not_before:
            return
        asking = {key: fetch for key, fetch in self.partitions.items()
                  if fetch.ask_epoch is not None and fetch.not_before <= now}
        if asking:
            self._send_offsets_for_leader_epoch(asking, now)
            return
        ready = [(key, fetch) for key, fetch in self.partitions.items()
                 if fetch.state is FetchState.FETCHING and fetch.not_before <= now]
        if not ready:
            return
        fetch_frame = self._frame
        if fetch_frame is None:
            settings = self._settings
            fetch_frame = self._frame = FetchFrame(
                FETCH_VERSION, self.channel.client_id, replica_id=self.broker_id,
                max_wait_ms=settings.max_wait_ms, min_bytes=settings.min_bytes,
                max_bytes=settings.max_bytes, isolation_level=0,
                partition_max_bytes=settings.partition_max_bytes)
        sent = {}
        wanted = {}
        for key, fetch in ready:
            partition_log = fetch.partition.log
            offset = partition_log.log_end_offset
            wanted[key] = (offset, fetch.leader_epoch, partition_log.log_start_offset)
            sent[key] = (fetch, offset)
        frame = fetch_frame.frame(self.leader_id, wanted)
        self._sent(ApiKey.FETCH, self.channel.send_frame(
            self.leader_id, ApiKey.FETCH, FETCH_VERSION,
            functools.partial(FetchFrame.with_correlation_id, frame),
            functools.partial(self._answered, ApiKey.FETCH, sent)), sent, now)

    def _send_offsets_for_leader_epoch(self, asking, now):
        module = protocol.request_module(OFFSETS_FOR_LEADER_EPOCH, EPOCH_VERSION)
        topics = {}
        for key, fetch in asking.items():
            topics.setdefault(key[0], []).append(module.OffsetForLeaderPartition(
                partition=key[1], current_leader_epoch=fetch.leader_epoch,
                leader_epoch=fetch.ask_epoch))
        request = module.OffsetForLeaderEpochRequest(
            replica_id=self.broker_id,
            topics=tuple(module.OffsetForLeaderTopic(topic=name, partitions=tuple(parts))
                         for name, parts in topics.items()))
        sent = {key: (fetch, fetch.ask_epoch) for key, fetch in asking.items()}
        api_key = request.__api_key__
        self._sent(api_key, self.channel.send(
            self.leader_id, request, functools.partial(self._answered, api_key, sent)),
            sent, now)

    def _sent(self, api_key, sent_now, sent, now):
        """After a send of an ``api_key`` request (the channel connecting first if need
        be): remember ``sent`` as in flight; a leader that cannot be reached, or whose
        connection is lost, is tried again after the back-off; a full request ring on the
        next turn."""
        if sent_now:
            self._in_flight = sent
        elif not self.channel.connected:
            self._not_before = now + self._settings.backoff


    def restart(self, now, reason):
        """After an unexpected failure: drop the connection, and truncate every partition
        again before fetching (after the back-off)."""
        self._now = now
        self.channel.drop(reason)
        self._in_flight = None
        self._not_before = now + self._settings.backoff
        for fetch in self.partitions.values():
            if fetch.state is FetchState.FETCHING:
                fetch.state = FetchState.TRUNCATING
            fetch.ask_epoch = None

    # -- receiving ----------------------------------------------------------------------------

    def _answered(self, api_key, sent, response):
        """The channel's ``on_answer`` of the request in flight: None when the connection
        was lost (the partitions stay as they are; the next request after the back-off)."""
        now = self._now
        self._in_flight = None
        if response is None:
            self._not_before = now + self._settings.backoff
            return
        if api_key != ApiKey.FETCH:
            self._receive_epoch_end_offsets(response, sent, now)
            return
        for topic in response.responses:
            for data in topic.partitions:
                key = (topic.topic, data.partition_index)
                fetch, offset = sent.get(key, (None, None))
                if fetch is None or self.partitions.get(key) is not fetch \
                        or fetch.state is not FetchState.FETCHING \
                        or fetch.partition.log.log_end_offset != offset:
                    continue  # removed, re-added or truncated meanwhile: not this answer's
                self._handle(fetch, data, now)

    def _receive_epoch_end_offsets(self, response, sent, now):
        """The leader's answer to OffsetsForLeaderEpoch: truncate as the EpochTruncation
        decides, then Fetch, or ask about the older epoch it names (module doc)."""
        for topic in response.topics:
            for result in topic.partitions:
                key = (topic.topic, result.partition)
                fetch, epoch = sent.get(key, (None, None))
                if fetch is None or self.partitions.get(key) is not fetch \
                        or fetch.ask_epoch != epoch:
                    continue
                partition = fetch.partition
                code = result.error_code
                if code in _FENCED:
                    fetch.state, fetch.ask_epoch = FetchState.FENCED, None
                    continue
                if code != 0:
                    log.info("%s-%d: leader %d answered %s to OffsetsForLeaderEpoch; backing "
                             "off", partition.topic, partition.index, self.leader_id,
                             code.name)
                    fetch.not_before = now + self._settings.backoff
                    continue
                offset, again = self._epoch_truncation.decide(
                    partition, result.leader_epoch, result.end_offset)
                if not partition.may_truncate_to(offset):
                    self._refuse(fetch, offset, now)
                    continue
                try:
                    dropped = partition.truncate_to(offset)
                except StorageError as exc:
                    self._storage_failed(fetch, exc, now)
                    continue
                log.info("%s-%d: leader %d ends epoch %d at %d: truncated to %d (%d bytes)%s",
                         partition.topic, partition.index, self.leader_id,
                         result.leader_epoch, result.end_offset, offset, dropped,
                         "" if again is None else f", asking about epoch {again}")
                fetch.ask_epoch = again
                if again is None:
                    fetch.state = FetchState.FETCHING

    def _handle(self, fetch, data, now):
        partition = fetch.partition
        code = data.error_code
        try:
            if code == 0:
                if data.records:
                    partition.append_as_follower(data.records)
                partition.update_follower_high_watermark(data.high_watermark)
                partition.update_follower_log_start(data.log_start_offset)
            elif code == OffsetOutOfRangeError.errno:
                self._out_of_range(fetch, data, now)
            elif code in _FENCED:
                log.info("%s-%d: leader %d answered %s for epoch %d; waiting for newer "
                         "metadata", partition.topic, partition.index, self.leader_id,
                         code.name, fetch.leader_epoch)
                fetch.state = FetchState.FENCED
            else:
                log.info("%s-%d: leader %d answered %s; backing off %.3f s",
                         partition.topic, partition.index, self.leader_id, code.name,
                         self._settings.backoff)
                fetch.not_before = now + self._settings.backoff
        except StorageError as exc:
            self._storage_failed(fetch, exc, now)

    def _out_of_range(self, fetch, data, now):
        """OFFSET_OUT_OF_RANGE (module doc)."""
        partition = fetch.partition
        end = partition.log.log_end_offset
        if end < data.log_start_offset:
            partition.truncate_fully_and_start_at(data.log_start_offset)
            log.warning("%s-%d: log end %d is below leader %d's log start %d: log restarted "
                        "empty there", partition.topic, partition.index, end,
                        self.leader_id, data.log_start_offset)
        else:
            target = max(data.high_watermark, partition.log.log_start_offset)
            if not partition.may_truncate_to(target):
                self._refuse(fetch, target, now)
                return
            partition.truncate_to(target)
            log.warning("%s-%d: log end %d is past leader %d's log: truncated to its high "
                        "watermark %d", partition.topic, partition.index, end,
                        self.leader_id, target)

    def _refuse(self, fetch, offset, now):
        """The leader's log would make this intact replica truncate below its high
        watermark (``Partition.may_truncate_to``): the leader lost acknowledged records.
        Keep them, back off and truncate again (ask the leader again) afterwards: the
        controller moves leadership to an intact replica (``damaged_replicas``)."""
        partition = fetch.partition
        log.warning("%s-%d: leader %d (epoch %d) would truncate this replica to %d, below "
                    "its high watermark %d: it lacks acknowledged records; not truncating, "
                    "asking again in %.3f s", partition.topic, partition.index,
                    self.leader_id, fetch.leader_epoch, offset, partition.high_watermark,
                    self._settings.backoff)
        fetch.state, fetch.ask_epoch = FetchState.TRUNCATING, None
        fetch.not_before = now + self._settings.backoff

    def _storage_failed(self, fetch, exc, now):
        partition = fetch.partition
        if partition.log.offline is not None:
            log.error("%s-%d: log offline, no longer fetched from leader %d: %s",
                      partition.topic, partition.index, self.leader_id, exc)
            self.remove((partition.topic, partition.index))
            return
        level = logging.WARNING if isinstance(exc, KafkaStorageError) else logging.ERROR
        log.log(level, "%s-%d: appending what leader %d sent failed (backing off %.3f s): %s",
                partition.topic, partition.index, self.leader_id, self._settings.backoff,
                exc)
        fetch.not_before = now + self._settings.backoff


class FetchSettings:
    """The replica.fetch.* settings of a broker config, in the units the fetchers use."""

    __slots__ = ("max_wait_ms", "min_bytes", "max_bytes", "partition_max_bytes", "backoff",
                 "ring_bytes", "policy")

    def __init__(self, config, clock):
        self.max_wait_ms = config["replica.fetch.wait.max.ms"]
        self.min_bytes = config["replica.fetch.min.bytes"]
        self.max_bytes = config["replica.fetch.response.max.bytes"]
        self.partition_max_bytes = config["replica.fetch.max.bytes"]
        self.backoff = config["replica.fetch.backoff.ms"] / 1000
        self.ring_bytes = config["ringlog.ring.bytes"]
        self.policy = config.wait_policy(clock)


class ReplicaFetcherManager:
    """The fetchers of broker ``broker_id`` over the partitions of ``replicas`` (module
    doc). ``waker``: the broker's Listener (responses ring its doorbell); ``clock``:
    monotonic seconds; ``connector``: ``shm_ring.connect`` (tests pass their own).

    ``epoch_truncation``: the epoch-based truncation decision (None: truncate to the high
    watermark), an object with ``epoch_to_ask(partition)`` (the epoch to send in
    OffsetsForLeaderEpoch, the latest of the partition's leader-epoch cache; None when it
    has none: the high watermark rule applies) and ``decide(partition, leader_epoch,
    end_offset)`` -> ``(offset to truncate to, epoch to ask about next or None)`` (KIP-279).
    """

    def __init__(self, cluster_id, broker_id, replicas, config, waker, clock,
                 connector=connect, epoch_truncation=None):
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self._replicas = replicas
        self._settings = FetchSettings(config, clock)
        self._waker = waker
        self._connect = connector
        self._epoch_truncation = epoch_truncation
        self._image = None
        self.fetchers = {}  # leader broker id -> ReplicaFetcher

    def fetcher_of(self, key):
        """The ReplicaFetcher fetching ``key``, or None."""
        for fetcher in self.fetchers.values():
            if key in fetcher.partitions:
                return fetcher
        return None

    def poll(self, now):
        """Follow a new image, then give every fetcher its turn (never blocks)."""
        if self._replicas.image is not self._image:
            self._reconcile()
        for fetcher in list(self.fetchers.values()):
            try:
                fetcher.poll(now)
            except Exception as exc:  # a bug must not end the broker: that fetcher restarts
                log.exception("%r failed", fetcher)
                fetcher.restart(now, exc)

    def next_deadline(self):
        """The earliest back-off end of any fetcher (None: nothing waits on the clock)."""
        deadlines = [d for f in self.fetchers.values()
                     if (d := f.next_deadline()) is not None]
        return min(deadlines) if deadlines else None

    def close(self):
        """Close every fetcher's connection (unlinking its rings); safe to call twice."""
        for fetcher in self.fetchers.values():
            fetcher.close()
        self.fetchers.clear()

    def _reconcile(self):
        """Add, move and remove partitions after the image changed (module doc)."""
        image = self._image = self._replicas.image
        brokers = image.brokers if image is not None else {}
        wanted = {}
        for partition in self._replicas.partitions():
            leader = partition.leader_id
            info = brokers.get(leader)
            if (leader == self.broker_id or leader < 0 or info is None or not info.alive
                    or partition.log.offline is not None):
                continue
            wanted[(partition.topic, partition.index)] = partition
        for leader_id, fetcher in list(self.fetchers.items()):
            for key, fetch in list(fetcher.partitions.items()):
                partition = wanted.get(key)
                if (partition is None or partition.leader_id != leader_id
                        or partition is not fetch.partition
                        or partition.leader_epoch != fetch.leader_epoch):
                    fetcher.remove(key)
        for key, partition in wanted.items():
            fetcher = self.fetchers.get(partition.leader_id)
            if fetcher is None:
                fetcher = self.fetchers[partition.leader_id] = ReplicaFetcher(
                    self.cluster_id, self.broker_id, partition.leader_id, self._settings,
                    self._connect, self._waker, self._epoch_truncation)
            if key not in fetcher.partitions:
                fetcher.add(partition)
                log.info("broker %d follows %s-%d: leader %d, epoch %d", self.broker_id,
                         key[0], key[1], partition.leader_id, partition.leader_epoch)
        for leader_id, fetcher in list(self.fetchers.items()):
            if not fetcher.partitions:
                fetcher.close()
                del self.fetchers[leader_id]
