"""Group membership and offset commits of a KafkaConsumer with a ``group_id`` (Kafka's
classic consumer protocol, as Kafka's ``ConsumerCoordinator`` and kafka-python's).

**Connections.** The consumer's own KafkaClient carries fetches and metadata; group
requests go on a second client (``_group``, owned by the consumer's thread too), so a
JoinGroup parked at the coordinator for a whole rebalance holds up no fetch (Java's
separate coordinator connection); its request timeout covers a rebalance (Java's
``max(request.timeout.ms, max.poll.interval.ms + 5 s)``). The heartbeat thread owns a third
client (``HeartbeatThread``): KafkaClients are single-owner.

**Joining** (``ensure_active_group``, from every poll while the consumer subscribes):
FindCoordinator (retried after ``retry_backoff_ms`` on COORDINATOR_NOT_AVAILABLE,
NOT_COORDINATOR and connection errors: the offsets topic may be being created), then
JoinGroup with one protocol per assignor of ``partition_assignment_strategy`` (metadata:
the subscription, the partitions owned, the generation, and the user data of an assignor
with ``subscription_user_data(owned, generation)``, given what SyncGroup last assigned and
its generation: the eager sticky assignor's previous assignment). MEMBER_ID_REQUIRED → join again
with the id given. The leader runs the assignor the coordinator's vote chose over every
member's subscription and the partition counts in its metadata, and sends the result in
SyncGroup; the others send none. The assignment applies when SyncGroup answers.

**Rebalance protocols.** Eager: before every rejoin everything owned is committed (with
``enable_auto_commit``) and revoked (``ConsumerRebalanceListener``). Cooperative (KIP-429),
when every assignor of the strategy is cooperative, or the first one is and the group's
last vote chose it: nothing is revoked before joining; after SyncGroup only the partitions
that moved away are committed and revoked, and the member joins once more so that the
next generation hands them to their new owner. A leader running an eager assignor for
members that kept partitions leaves out of this generation every partition moving between
two members (the same rule), so no partition has two owners in one generation.

**Errors** (JoinGroup, SyncGroup, Heartbeat, OffsetCommit): REBALANCE_IN_PROGRESS → rejoin at
the next poll; UNKNOWN_MEMBER_ID → forget the member id and generation, ILLEGAL_GENERATION →
forget the generation, and rejoin; the partitions owned are then *lost*
(``on_partitions_lost``, nothing committed); COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR /
connection errors → find the coordinator again; FENCED_INSTANCE_ID (another consumer took
this ``group_instance_id``) is fatal: raised by every later poll. Other JoinGroup errors
(INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, GROUP_MAX_SIZE_REACHED ...) are
raised by the poll, which tries again at the next one.

**Liveness.** The heartbeat thread sends a Heartbeat every ``heartbeat_interval_ms`` while
the member has a generation (from JoinGroup's answer on). A consumer that does not call
poll() within ``max_poll_interval_ms`` leaves the group from that thread (LeaveGroup; a
static member sends none) and rejoins at its next poll, its partitions lost.

**Offsets.** A newly assigned partition starts from its committed offset (OffsetFetch),
else from ``auto_offset_reset``. A read_committed consumer asks with ``require_stable``
(KIP-447, as Java's ConsumerCoordinator): while a partition's offset is pending in an open
transaction (or being replicated) the coordinator answers UNSTABLE_OFFSET_COMMIT, and the
partitions keep waiting — no position, no reset — asked again every ``retry_backoff_ms``
(any retriable OffsetFetch failure is), so they start from the transaction's offsets once
it commits (or the older ones if it aborts); read_uncommitted consumers get the last
committed offset at once (``require_stable`` false, same version). ``commit``
(synchronous: retried while retriable, until the timeout), ``commit_async`` and
``committed``; with ``enable_auto_commit``, every ``auto_commit_interval_ms`` from poll
(asynchronous), before revocations (synchronous) and on close. A synchronous commit fails
with CommitFailedError on ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID and REBALANCE_IN_PROGRESS
(kafka-python's rule). A consumer that uses ``assign()`` with a group_id commits outside
group management (generation -1).

**Static membership** (``group_instance_id``): sent in every request; close and
unsubscribe send no LeaveGroup (the member keeps its partitions across a restart within
the session timeout).

Threads: the consumer's thread calls everything but ``HeartbeatThread``; the two share
``member``, a ``_Member`` (guarded by its lock). Listener callbacks run in the consumer's
thread.
"""
from __future__ import annotations

import datetime
import logging
import threading
import time
import uuid

from cluster.client.future import Future
from cluster.client.kafka_client import API_VERSIONS, KafkaClient
from cluster.errors import (
    CommitFailedError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    KafkaError,
    KafkaTimeoutError,
    MemberIdRequiredError,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
    for_code,
)
from cluster.protocol import frames as protocol
from cluster.protocol.consumer_protocol import (
    NO_GENERATION,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from cluster.protocol.frames import ApiKey
from cluster.structs import OffsetAndMetadata, TopicPartition
from consumer_proc.assignors import resolve
from consumer_proc.assignors.member import Member
from consumer_proc.assignors.sticky import previous_owners
from consumer_proc.coordinator_metrics import CoordinatorMetrics
from consumer_proc.fetcher import build
from consumer_proc.subscription_state import AUTO_PATTERN

log = logging.getLogger(__name__)

COOPERATIVE = "COOPERATIVE"
CONSUMER_PROTOCOL_TYPE = "consumer"
#: Kafka's JoinGroup request timeout margin over the rebalance timeout.
JOIN_TIMEOUT_MARGIN_MS = 5000
#: Longest single wait of the consumer's thread on the group client while it also has
#: fetches to look after.
WAIT_SLICE = 0.05

UNJOINED, JOINING, SYNCING, STABLE = "UNJOINED", "JOINING", "SYNCING", "STABLE"

#: What a stable member sends while records flow: their codecs are loaded when it becomes
#: stable (kio imports an API's schema modules at its first use, 5-9 ms, which a member's
#: first commit or heartbeat would otherwise pay between two polls: frames.load_codecs).
_STABLE_APIS = (ApiKey.OFFSET_COMMIT, ApiKey.HEARTBEAT)

_COORDINATOR_ERRORS = (CoordinatorNotAvailableError.errno, NotCoordinatorError.errno)
_RETRY_ERRORS = (CoordinatorLoadInProgressError.errno, RebalanceInProgressError.errno)
_COMMIT_FAILED = (IllegalGenerationError.errno, UnknownMemberIdError.errno,
                  RebalanceInProgressError.errno)


def _module(api_key):
    """The kio request module of the version this client sends."""
    return protocol.request_module(api_key, API_VERSIONS[api_key])


def _build_request(api_key, name, **fields):
    module = _module(api_key)
    return build(getattr(module, name), **fields), module


class _Member:
    """This consumer as a member of its group — its coordinator, member id, generation and
    join state — which the consumer's thread and the heartbeat thread share (guarded by
    ``lock``); ``ConsumerCoordinator.member``."""

    def __init__(self):
        self.lock = threading.Lock()
        self.coordinator = None      # broker id, or None while unknown
        self.member_id = ""
        self.generation = NO_GENERATION
        self.joined = (NO_GENERATION, "")  # (generation, member id) of the last completed join
        self.protocol = None
        self.state = UNJOINED
        self.rejoin_needed = True
        self.lost = False            # the generation was taken away: partitions are lost
        self.fatal = None            # an error every later poll raises
        self.last_poll = 0.0

    def reset(self, member_id_too):
        """Forget the generation (and the member id): the partitions are lost."""
        self.generation = NO_GENERATION
        self.protocol = None
        if member_id_too:
            self.member_id = ""
        self.state = UNJOINED
        self.rejoin_needed = True
        self.lost = True


class ConsumerCoordinator:
    """The group side of one KafkaConsumer (module doc). ``client``: the consumer's
    KafkaClient (metadata); ``subscription``: its SubscriptionState; ``config``: its
    ConsumerConfig; ``clock``: monotonic seconds."""

    def __init__(self, client, subscription, config, clock=time.monotonic):
        self._client = client
        self._subscription = subscription
        self._config = config
        self._clock = clock
        self.group_id = config["group_id"]
        self._instance_id = config["group_instance_id"]
        self._assignors = resolve(config["partition_assignment_strategy"])
        self._retry_backoff = config["retry_backoff_ms"] / 1000
        self._session_timeout = config["session_timeout_ms"]
        self._rebalance_timeout = config["max_poll_interval_ms"]
        self._auto_commit = config["enable_auto_commit"]
        self._auto_commit_interval = config["auto_commit_interval_ms"] / 1000
        self._next_auto_commit = clock() + self._auto_commit_interval
        self._default_commit_callback = config["default_offset_commit_callback"]
        self._api_timeout = config["default_api_timeout_ms"] / 1000
        self._exclude_internal = config["exclude_internal_topics"]
        self.listener = None
        self.member = _Member()
        self.member.last_poll = clock()
        self.metrics = CoordinatorMetrics(config["metrics_num_samples"],
                                          config["metrics_sample_window_ms"] / 1000, clock)
        join_timeout = max(config["request_timeout_ms"],
                           self._rebalance_timeout + JOIN_TIMEOUT_MARGIN_MS)
        group_config = config.replace(
            request_timeout_ms=join_timeout,
            connections_max_idle_ms=max(config["connections_max_idle_ms"], join_timeout + 1))
        self._group = KafkaClient(group_config, clock=clock)
        self._in_flight = None       # (kind, future) of the JoinGroup or SyncGroup out
        self._find = None            # the FindCoordinator future out
        self._next_find = 0.0
        self._next_join = 0.0
        self._joined_topics = None   # the topics of the last JoinGroup's subscription
        # (generation, sorted (topic, partition) pairs) of the last SyncGroup's assignment
        self._last_assignment = (NO_GENERATION, ())
        # (topics, {topic: partition count}) the leader assigned from: it rejoins when the
        # metadata says otherwise (a topic created, partitions added)
        self._leader_snapshot = None
        self._metadata_version = None
        self._metadata_max_age = config["metadata_max_age_ms"] / 1000
        self._committed_fetch = None  # (future, [tp]) of an OffsetFetch for new partitions
        self._next_committed_fetch = 0.0  # after a retriable failure: not before then
        # KIP-447: a read_committed consumer waits for offsets pending in a transaction
        self._require_stable = config["isolation_level"] == "read_committed"
        self._closed = False
        self.heartbeat = HeartbeatThread(self, config, clock)
        try:
            self.heartbeat.start()
        except BaseException:
            self._group.close()
            raise

    # -- state ---------------------------------------------------------------------------------

    def _raise_fatal(self):
        if self.member.fatal is not None:
            raise self.member.fatal

    def coordinator_dead(self, why):
        with self.member.lock:
            if self.member.coordinator is not None:
                log.info("group %s: coordinator %d marked unknown: %s", self.group_id,
                         self.member.coordinator, why)
            self.member.coordinator = None

    def request_rejoin(self):
        with self.member.lock:
            self.member.rejoin_needed = True

    def cooperative(self):
        """True when this member rebalances cooperatively (module doc)."""
        if all(_protocol(a) == COOPERATIVE for a in self._assignors):
            return True
        first = self._assignors[0]
        return _protocol(first) == COOPERATIVE and self.member.protocol == first.name

    def _await(self, future, deadline):
        """Wait until ``future`` (of the group client) is done or ``deadline`` passes,
        keeping the consumer's client's fetches moving; True if done. The group client is
        polled at least once, so a poll(timeout_ms=0) loop gets its answers too."""
        self._group.poll(0)
        while not future.is_done and self._clock() < deadline:
            remaining = deadline - self._clock()
            if remaining > 0:
                self._group.poll(min(remaining, WAIT_SLICE))
            self._client.poll(0)
            self.member.last_poll = self._clock()  # still inside the user's poll
        return future.is_done

    # -- the coordinator -----------------------------------------------------------------------

    def ensure_coordinator(self, deadline):
        """Find the coordinator; False if it is still unknown at ``deadline`` (the
        FindCoordinator out then stays out for the next call)."""
        while self.member.coordinator is None:
            self._raise_fatal()
            if self._find is None:
                node = self._group.least_loaded_node()
                if node is not None and self._clock() >= self._next_find:
                    request, _ = _build_request(
                        ApiKey.FIND_COORDINATOR, "FindCoordinatorRequest", key=self.group_id,
                        key_type=0)
                    self._find = self._group.send(node, request)
            future = self._find
            if future is not None and self._await(future, deadline):
                self._find = None
                if self._found(future):
                    return True
                self._next_find = self._clock() + self._retry_backoff
            remaining = deadline - self._clock()
            if remaining <= 0:
                return False
            if self._find is None:
                time.sleep(min(remaining, max(0.0, self._next_find - self._clock()),
                               self._retry_backoff))
        return True

    def _found(self, future):
        """Handle a FindCoordinator answer; True if it named the coordinator."""
        if future.failed():
            log.debug("FindCoordinator for group %s failed: %s", self.group_id,
                      future.exception)
            return False
        code = int(future.value.error_code)
        if code:
            error = for_code(code)
            if not error.retriable:
                raise error(f"FindCoordinator for group {self.group_id!r}")
            log.debug("FindCoordinator for group %s: %s", self.group_id, error.message)
            return False
        with self.member.lock:
            self.member.coordinator = int(future.value.node_id)
        log.info("group %s: coordinator is broker %d", self.group_id, self.member.coordinator)
        self.heartbeat.wake()
        return True

    # -- joining -------------------------------------------------------------------------------

    def _subscribed_topics(self):
        subscription = self._subscription
        if subscription.subscription_type == AUTO_PATTERN:
            cluster = self._client.cluster
            topics = {name for name, info in cluster.topics.items()
                      if not info.error_code and subscription.matches(name)
                      and not (self._exclude_internal and info.is_internal)}
            if topics != subscription.subscription:
                subscription.set_pattern_topics(topics)
        return set(subscription.subscription or ())

    def _need_rejoin(self):
        if self.member.rejoin_needed or self.member.state != STABLE:
            return True
        cluster = self._client.cluster
        if self._subscription.subscription_type == AUTO_PATTERN and (
                cluster.last_refresh is None
                or self._clock() - cluster.last_refresh >= self._metadata_max_age):
            cluster.request_update(all_topics=True)  # new topics may match
        if cluster.version != self._metadata_version:
            self._metadata_version = cluster.version
            if self._subscribed_topics() != self._joined_topics:
                log.info("group %s: subscription changed, rejoining", self.group_id)
                self.request_rejoin()
                return True
            if self._leader_snapshot is not None and self._leader_snapshot[1] != \
                    self._partition_counts(self._leader_snapshot[0]):
                log.info("group %s: partitions of the group's topics changed, rejoining",
                         self.group_id)
                self.request_rejoin()
                return True
        return False

    def _partition_counts(self, topics):
        cluster = self._client.cluster
        counts = {}
        for topic in topics:
            partitions = cluster.partitions_for_topic(topic)
            if partitions:
                counts[topic] = len(partitions)
        return counts

    def ensure_active_group(self, deadline):
        """Drive the join until the member is Stable in a generation or ``deadline`` passes
        (the consumer's poll calls it); True when Stable."""
        while True:
            self._raise_fatal()
            if not self._need_rejoin() and self._in_flight is None:
                return True
            if not self.ensure_coordinator(deadline):
                return False
            if self._in_flight is None:
                now = self._clock()
                if now < self._next_join:
                    if deadline <= now:
                        return False
                    time.sleep(min(deadline - now, self._next_join - now))
                    continue
                self._on_join_prepare()
                self._send_join()
            kind, future = self._in_flight
            if not self._await(future, deadline):
                return False
            self._in_flight = None
            if kind == "join":
                self._handle_join(future)
            else:
                self._handle_sync(future)

    def _on_join_prepare(self):
        owned = self._subscription.assigned_partitions()
        if self.member.lost:
            with self.member.lock:
                self.member.lost = False
            if owned:
                log.info("group %s: partitions %s lost", self.group_id, sorted(owned))
                self._subscription.assign_from_group([])
                self._invoke("on_partitions_lost", owned)
            return
        if self.cooperative():
            gone = {tp for tp in owned if tp.topic not in self._subscribed_topics()}
            if gone:
                self._revoke(gone, owned - gone)
            return
        if self.member.state == STABLE or owned:
            self._revoke(owned, set())

    def _revoke(self, revoked, kept):
        """Commit (auto-commit) and revoke ``revoked``; the assignment becomes ``kept``."""
        if self._auto_commit and revoked:
            self._commit_quietly({tp: o for tp, o in self.all_consumed().items()
                                  if tp in revoked})
        self._invoke("on_partitions_revoked", set(revoked))
        self._subscription.assign_from_group(sorted(kept))

    def _send_join(self):
        topics = self._subscribed_topics()
        self._client.cluster.add_topics(topics)
        owned = sorted(self._subscription.assigned_partitions())
        with self.member.lock:
            member_id, generation = self.member.member_id, self.member.generation
            self.member.rejoin_needed = False
            self.member.state = JOINING
        last_generation, last_assigned = self._last_assignment
        metadata = {a.name: encode_subscription(
            topics, owned=owned, generation=generation,
            user_data=_user_data(a, last_assigned, last_generation)) for a in self._assignors}
        module = _module(ApiKey.JOIN_GROUP)
        request = build(
            module.JoinGroupRequest, group_id=self.group_id,
            session_timeout=datetime.timedelta(milliseconds=self._session_timeout),
            rebalance_timeout=datetime.timedelta(milliseconds=self._rebalance_timeout),
            member_id=member_id, group_instance_id=self._instance_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE, protocols=tuple(
                module.JoinGroupRequestProtocol(name=a.name, metadata=metadata[a.name])
                for a in self._assignors))
        self._joined_topics = topics
        log.debug("group %s: JoinGroup as %r (generation %d), subscribing to %s",
                  self.group_id, member_id, generation, sorted(topics))
        self._in_flight = ("join", self.metrics.timed(
            self._group.send(self.member.coordinator, request), self.metrics.join_time))

    def _failed(self, future, what):
        """A JoinGroup / SyncGroup that failed to get an answer."""
        log.info("group %s: %s failed: %s", self.group_id, what, future.exception)
        if isinstance(future.exception, KafkaError) and not future.exception.retriable:
            raise future.exception
        self.coordinator_dead(str(future.exception))
        with self.member.lock:
            self.member.state = UNJOINED
            self.member.rejoin_needed = True

    def _group_error(self, code, what):
        """The common handling of a JoinGroup / SyncGroup error code."""
        error = for_code(code)
        log.info("group %s: %s answered %s", self.group_id, what, error.message)
        with self.member.lock:
            if code == UnknownMemberIdError.errno:
                self.member.reset(member_id_too=True)
            elif code == IllegalGenerationError.errno:
                self.member.reset(member_id_too=False)
            elif code == FencedInstanceIdError.errno:
                self.member.fatal = error(f"group {self.group_id!r}: group_instance_id "
                                     f"{self._instance_id!r} was taken by another consumer")
                self.member.state = UNJOINED
            else:
                self.member.state = UNJOINED
                self.member.rejoin_needed = True
        if code in _COORDINATOR_ERRORS:
            self.coordinator_dead(error.message)
        elif code in _RETRY_ERRORS:
            self._next_join = self._clock() + self._retry_backoff
        elif code not in (UnknownMemberIdError.errno, IllegalGenerationError.errno):
            self._raise_fatal()
            self._next_join = self._clock() + self._retry_backoff
            raise error(f"{what} of group {self.group_id!r}")

    def _handle_join(self, future):
        if future.failed():
            return self._failed(future, "JoinGroup")
        response = future.value
        code = int(response.error_code)
        if code == MemberIdRequiredError.errno:
            with self.member.lock:
                self.member.member_id = response.member_id
                self.member.state = UNJOINED
            return None
        if code:
            return self._group_error(code, "JoinGroup")
        with self.member.lock:
            self.member.member_id = response.member_id
            self.member.generation = int(response.generation_id)
            self.member.protocol = response.protocol_name
            self.member.state = SYNCING
        self.heartbeat.wake()
        self._leader_snapshot = None
        log.info("group %s: joined generation %d as %s (leader %s, protocol %s)",
                 self.group_id, response.generation_id, response.member_id, response.leader,
                 response.protocol_name)
        assignments = {}
        if response.leader == response.member_id:
            assignments = self._perform_assignment(response.protocol_name, response.members)
        module = _module(ApiKey.SYNC_GROUP)
        request = build(
            module.SyncGroupRequest, group_id=self.group_id,
            generation_id=response.generation_id, member_id=response.member_id,
            group_instance_id=self._instance_id, protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=response.protocol_name, assignments=tuple(
                module.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in assignments.items()))
        self._in_flight = ("sync", self.metrics.timed(
            self._group.send(self.member.coordinator, request), self.metrics.sync_time))
        return None

    def _perform_assignment(self, protocol_name, joined):
        """The leader's work: ``{member id: assignment bytes}``."""
        assignor = next((a for a in self._assignors if a.name == protocol_name), None)
        if assignor is None:
            raise KafkaError(f"group {self.group_id!r}: the coordinator chose assignor "
                             f"{protocol_name!r}, not one of this consumer's "
                             f"{[a.name for a in self._assignors]}")
        members = {}
        for j in joined:
            try:
                topics, owned, generation, user_data = decode_subscription(j.metadata)
            except ValueError as exc:
                log.warning("group %s: member %s's subscription ignored: %s", self.group_id,
                            j.member_id, exc)
                topics, owned, generation, user_data = (), (), NO_GENERATION, None
            members[j.member_id] = Member(j.member_id, tuple(topics), j.group_instance_id,
                                          tuple(owned), generation, user_data)
        topics = {t for m in members.values() for t in m.topics}
        cluster = self._client.cluster
        cluster.add_topics(topics)
        if any(cluster.partitions_for_topic(t) is None for t in topics):
            try:
                self._client.wait_for_metadata(self._api_timeout)
            except KafkaError as exc:
                log.warning("group %s: metadata for the assignment: %s", self.group_id, exc)
        counts = self._partition_counts(topics)
        assignment = assignor.assign(counts, members)
        if _protocol(assignor) != COOPERATIVE:
            assignment = without_moves(assignment, members, counts)
        self._leader_snapshot = (topics, counts)
        log.info("group %s: %s assignment of generation %d: %s", self.group_id, assignor.name,
                 self.member.generation, assignment)
        return {member_id: encode_assignment(parts)
                for member_id, parts in assignment.items()}

    def _handle_sync(self, future):
        if future.failed():
            return self._failed(future, "SyncGroup")
        code = int(future.value.error_code)
        if code:
            return self._group_error(code, "SyncGroup")
        parts, _ = decode_assignment(future.value.assignment)
        assigned = {TopicPartition(t, p) for t, ps in parts.items() for p in ps}
        unsubscribed = {tp for tp in assigned if not self._subscription.matches(tp.topic)}
        if unsubscribed:
            log.warning("group %s: assigned partitions of topics not subscribed to, ignored: "
                        "%s", self.group_id, sorted(unsubscribed))
            assigned -= unsubscribed
        with self.member.lock:
            if self.member.state != SYNCING:
                return None  # reset by the heartbeat thread meanwhile: rejoin
            self.member.state = STABLE
            self.member.joined = (self.member.generation, self.member.member_id)
            self._last_assignment = (self.member.generation,
                                     tuple(sorted((tp.topic, tp.partition) for tp in assigned)))
        for api_key in _STABLE_APIS:  # now, not at the first commit with records flowing
            protocol.load_codecs(api_key)
        owned = self._subscription.assigned_partitions()
        revoked = owned - assigned
        added = assigned - owned
        log.info("group %s: generation %d assignment %s", self.group_id, self.member.generation,
                 sorted(assigned))
        if revoked:
            self._revoke(revoked, owned - revoked)
            if self.cooperative():
                self.request_rejoin()  # KIP-429: the revoked partitions go to their new owner
        self._subscription.assign_from_group(sorted(assigned))
        self._next_auto_commit = self._clock() + self._auto_commit_interval
        self._invoke("on_partitions_assigned", added)
        return None

    def _invoke(self, method, partitions):
        listener = self.listener
        if listener is None:
            return
        try:
            getattr(listener, method)(set(partitions))
        except Exception:  # kafka-python: the rebalance goes on
            log.exception("group %s: rebalance listener %s failed", self.group_id, method)

    # -- per poll ------------------------------------------------------------------------------

    def poll(self, deadline):
        """The consumer's poll: note the poll (max_poll_interval_ms), join or rejoin if
        needed, fetch committed offsets of new partitions, auto-commit when due."""
        self._raise_fatal()
        self.member.last_poll = self._clock()
        subscription = self._subscription
        if subscription.partitions_auto_assigned() and not self.ensure_active_group(deadline):
            return
        self.refresh_committed_offsets(deadline)
        if self._auto_commit and self._clock() >= self._next_auto_commit:
            self._next_auto_commit = self._clock() + self._auto_commit_interval
            self._auto_commit_async()
        self._group.poll(0)

    # -- offsets -------------------------------------------------------------------------------

    def membership(self):
        """``(generation, member_id)`` of the last completed join (its SyncGroup answered;
        NO_GENERATION and "" before the first), as Java's ``groupMetadata()``: kept when
        the member leaves or loses its generation, so a zombie's producer sends its stale
        generation and member id and the coordinator fences it (KIP-447)."""
        with self.member.lock:
            return self.member.joined

    def all_consumed(self):
        """``{tp: OffsetAndMetadata}`` of every assigned partition with a position."""
        return {tp: OffsetAndMetadata(state.position, "", -1)
                for tp, state in self._subscription.assignment.items()
                if state.position is not None}

    def _commit_generation(self):
        """(generation, member id) a commit carries; CommitFailedError during a rebalance."""
        if not self._subscription.partitions_auto_assigned():
            return NO_GENERATION, ""
        with self.member.lock:
            if self.member.state != STABLE or self.member.generation == NO_GENERATION:
                if self.member.state in (JOINING, SYNCING):
                    raise CommitFailedError(
                        f"group {self.group_id!r} is rebalancing: commit cannot complete "
                        f"(the partitions may move); poll() to finish the rebalance")
                raise CommitFailedError(f"group {self.group_id!r}: this consumer is not in "
                                        f"a generation of the group (it left or was removed)")
            return self.member.generation, self.member.member_id

    def _send_commit(self, offsets, generation, member_id):
        module = _module(ApiKey.OFFSET_COMMIT)
        by_topic = {}
        for tp, o in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append(build(
                module.OffsetCommitRequestPartition, partition_index=tp.partition,
                committed_offset=o.offset,
                committed_leader_epoch=-1 if o.leader_epoch is None else o.leader_epoch,
                committed_metadata=o.metadata or "", commit_timestamp=-1))
        topics = tuple(build(module.OffsetCommitRequestTopic, name=topic,
                             partitions=tuple(parts)) for topic, parts in by_topic.items())
        request = build(module.OffsetCommitRequest, group_id=self.group_id,
                        generation_id_or_member_epoch=generation, generation_id=generation,
                        member_id=member_id, group_instance_id=self._instance_id,
                        retention_time=-1, topics=topics)
        return self.metrics.timed(self._group.send(self.member.coordinator, request),
                                  self.metrics.commit_latency)

    def _commit_error(self, response):
        """The first error of an OffsetCommit response as an exception (None if none), with
        its side effects on the membership (module doc)."""
        for topic in response.topics:
            for p in topic.partitions:
                code = int(p.error_code)
                if not code:
                    continue
                error = for_code(code)
                where = f"commit of {topic.name}-{p.partition_index} for group " \
                        f"{self.group_id!r}"
                if code in _COORDINATOR_ERRORS:
                    self.coordinator_dead(error.message)
                    return error(where)
                if code == FencedInstanceIdError.errno:
                    with self.member.lock:
                        self.member.fatal = error(where)
                    return self.member.fatal
                if code in _COMMIT_FAILED:
                    with self.member.lock:
                        if code == UnknownMemberIdError.errno:
                            self.member.reset(member_id_too=True)
                        elif code == IllegalGenerationError.errno:
                            self.member.reset(member_id_too=False)
                        else:
                            self.member.rejoin_needed = True
                    return CommitFailedError(
                        f"{where}: {error.message}; the group has rebalanced, the partitions "
                        f"may belong to another member (poll() to rejoin)")
                return error(where)
        return None

    def commit_sync(self, offsets=None, timeout=None):
        """Commit ``offsets`` ({tp: OffsetAndMetadata}; default: every position), retrying
        while retriable until ``timeout`` seconds (default: default_api_timeout_ms)."""
        offsets = self.all_consumed() if offsets is None else dict(offsets)
        if not offsets:
            return
        timeout = self._api_timeout if timeout is None else timeout
        deadline = self._clock() + timeout
        while True:
            self._raise_fatal()
            if not self.ensure_coordinator(deadline):
                raise KafkaTimeoutError(f"commit of group {self.group_id!r}: no coordinator "
                                        f"found within {timeout} s")
            generation, member_id = self._commit_generation()
            future = self._send_commit(offsets, generation, member_id)
            while not future.is_done and self._clock() < deadline:
                self._group.poll(max(0.0, min(deadline - self._clock(), WAIT_SLICE)))
            if not future.is_done:
                raise KafkaTimeoutError(f"commit of group {self.group_id!r} not answered "
                                        f"within {timeout} s")
            error = future.exception if future.failed() else self._commit_error(future.value)
            if error is None:
                log.debug("group %s: committed %s", self.group_id, offsets)
                return
            if not (isinstance(error, KafkaError) and error.retriable):
                raise error
            if future.failed():
                self.coordinator_dead(str(error))
            if self._clock() + self._retry_backoff >= deadline:
                raise error
            time.sleep(self._retry_backoff)

    def commit_async(self, offsets=None, callback=None):
        """Send an OffsetCommit; returns a Future of the offsets. ``callback(offsets,
        response_or_exception)`` runs in a later poll (kafka-python's form)."""
        offsets = self.all_consumed() if offsets is None else dict(offsets)
        callback = callback or self._default_commit_callback
        result = Future()
        if callback is not None:
            result.add_callback(lambda value: callback(offsets, value))
            result.add_errback(lambda exc: callback(offsets, exc))
        try:
            self._raise_fatal()
            if self.member.coordinator is None:
                raise CoordinatorNotAvailableError(f"group {self.group_id!r}: coordinator "
                                                   f"unknown")
            generation, member_id = self._commit_generation()
        except KafkaError as exc:
            return result.failure(exc)
        if not offsets:
            return result.success({})

        def answered(response):
            error = self._commit_error(response)
            if error is None:
                result.success(offsets)
            else:
                result.failure(error)

        def failed(exc):
            self.coordinator_dead(str(exc))
            result.failure(exc)

        future = self._send_commit(offsets, generation, member_id)
        future.add_callback(answered)
        future.add_errback(failed)
        return result

    def _auto_commit_async(self):
        offsets = self.all_consumed()
        if not offsets or (self._subscription.partitions_auto_assigned()
                           and self.member.state != STABLE):
            return
        if self.member.coordinator is None and not self.ensure_coordinator(self._clock()):
            return
        self.commit_async(offsets, callback=self._auto_commit_done)

    def _auto_commit_done(self, offsets, result):
        if isinstance(result, Exception):
            log.warning("group %s: auto-commit of %s failed: %s", self.group_id,
                        sorted(offsets), result)
        else:
            log.debug("group %s: auto-committed %s", self.group_id, offsets)

    def _commit_quietly(self, offsets, timeout=None):
        """A synchronous commit whose failure is logged (auto-commit before a revocation
        and on close)."""
        try:
            self.commit_sync(offsets, timeout)
        except KafkaError as exc:
            log.warning("group %s: commit of %s failed: %s", self.group_id, sorted(offsets),
                        exc)

    def _send_offset_fetch(self, partitions):
        topics = sorted({tp.topic for tp in partitions})
        module = _module(ApiKey.OFFSET_FETCH)
        request = build(
            module.OffsetFetchRequest, group_id=self.group_id,
            require_stable=self._require_stable, topics=tuple(
                module.OffsetFetchRequestTopic(name=t, partition_indexes=tuple(
                    sorted(tp.partition for tp in partitions if tp.topic == t)))
                for t in topics))
        return self._group.send(self.member.coordinator, request)

    def _parse_offset_fetch(self, response):
        """``{tp: OffsetAndMetadata or None}``; raises a group-level error."""
        code = int(getattr(response, "error_code", 0))
        if code:
            if code in _COORDINATOR_ERRORS:
                self.coordinator_dead(for_code(code).message)
            raise for_code(code)(f"OffsetFetch of group {self.group_id!r}")
        found = {}
        unstable = []
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                code = int(p.error_code)
                if code == UnstableOffsetCommitError.errno:
                    unstable.append(tp)
                elif code:
                    raise for_code(code)(f"OffsetFetch of {tp} for group {self.group_id!r}")
                found[tp] = None if p.committed_offset < 0 else OffsetAndMetadata(
                    p.committed_offset, p.metadata or "", p.committed_leader_epoch)
        if unstable:
            log.info("group %s: %s still have unstable offsets (a transaction's offsets "
                     "waiting for its end, or a commit being replicated); asking again",
                     self.group_id, sorted(unstable))
            raise UnstableOffsetCommitError(
                f"OffsetFetch of group {self.group_id!r}: unstable offsets of "
                f"{sorted(unstable)}")
        return found

    def fetch_committed(self, partitions, timeout):
        """``{tp: OffsetAndMetadata or None}`` for ``partitions`` (blocking)."""
        deadline = self._clock() + timeout
        while True:
            self._raise_fatal()
            if not self.ensure_coordinator(deadline):
                raise KafkaTimeoutError(f"OffsetFetch of group {self.group_id!r}: no "
                                        f"coordinator found within {timeout} s")
            future = self._send_offset_fetch(partitions)
            while not future.is_done and self._clock() < deadline:
                self._group.poll(max(0.0, min(deadline - self._clock(), WAIT_SLICE)))
            if not future.is_done:
                raise KafkaTimeoutError(f"OffsetFetch of group {self.group_id!r} not "
                                        f"answered within {timeout} s")
            try:
                if future.failed():
                    self.coordinator_dead(str(future.exception))
                    raise future.exception
                return self._parse_offset_fetch(future.value)
            except KafkaError as exc:
                if not exc.retriable or self._clock() + self._retry_backoff >= deadline:
                    raise
            time.sleep(self._retry_backoff)

    def refresh_committed_offsets(self, deadline):
        """Positions of partitions awaiting their committed offsets: the committed offset,
        else left to ``auto_offset_reset``. Waits for the OffsetFetch until ``deadline`` at
        most (an answer still out is looked at by the next call)."""
        assignment = self._subscription.assignment
        if self._committed_fetch is None:
            waiting = [tp for tp, s in assignment.items() if s.awaiting_committed]
            if not waiting or self._clock() < self._next_committed_fetch:
                return
            if self.member.coordinator is None and not self.ensure_coordinator(deadline):
                return
            self._committed_fetch = (self._send_offset_fetch(waiting), waiting)
        future, partitions = self._committed_fetch
        if not self._await(future, deadline):
            return
        self._committed_fetch = None
        try:
            if future.failed():
                self.coordinator_dead(str(future.exception))
                raise future.exception
            found = self._parse_offset_fetch(future.value)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            log.debug("group %s: OffsetFetch failed (%s); asking again", self.group_id, exc)
            self._next_committed_fetch = self._clock() + self._retry_backoff
            return
        for tp in partitions:
            state = assignment.get(tp)
            if state is None or not state.awaiting_committed:
                continue  # unassigned, sought or reset meanwhile
            committed = found.get(tp)
            if committed is None:
                state.awaiting_committed = False  # auto_offset_reset decides
            else:
                log.info("group %s: %s starts at its committed offset %d", self.group_id, tp,
                         committed.offset)
                state.seek(committed.offset)

    # -- leaving -------------------------------------------------------------------------------

    def _leave_group(self, client, reason):
        """LeaveGroup (dynamic members only), best effort; resets the member."""
        with self.member.lock:
            member_id, coordinator = self.member.member_id, self.member.coordinator
            self.member.reset(member_id_too=True)
            self.member.lost = False
        if self._instance_id is not None or not member_id or coordinator is None:
            return
        log.info("group %s: member %s leaves the group: %s", self.group_id, member_id, reason)
        module = _module(ApiKey.LEAVE_GROUP)
        request = build(
            module.LeaveGroupRequest, group_id=self.group_id,
            member_id=member_id, members=(module.MemberIdentity(
                member_id=member_id, group_instance_id=None),))
        try:
            client.request(coordinator, request, timeout=min(self._api_timeout, 5.0))
        except KafkaError as exc:
            log.info("group %s: LeaveGroup failed: %s", self.group_id, exc)

    def on_unsubscribe(self):
        """unsubscribe(): revoke what is owned and leave the group."""
        owned = self._subscription.assigned_partitions()
        if self._subscription.partitions_auto_assigned() and owned:
            self._invoke("on_partitions_revoked", owned)
        if self.member.state != UNJOINED or self.member.member_id:
            self._leave_group(self._group, "unsubscribe")
        self._in_flight = None
        self._committed_fetch = None
        self._joined_topics = None

    def close(self, autocommit=True, timeout=None):
        """Commit (auto-commit), revoke, leave (dynamic members), stop the heartbeat thread
        and close the group client. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if autocommit and self._auto_commit and self.member.fatal is None and (
                    not self._subscription.partitions_auto_assigned()
                    or self.member.state == STABLE):
                self._commit_quietly(self.all_consumed(), timeout)
            if self._subscription.partitions_auto_assigned():
                owned = self._subscription.assigned_partitions()
                if owned and self.member.state == STABLE:
                    self._invoke("on_partitions_revoked", owned)
        finally:
            stopped = self.heartbeat.stop()
            try:
                if self._subscription.partitions_auto_assigned() and self.member.member_id:
                    # On the heartbeat thread's connection once it is stopped: the group
                    # client's may hold a JoinGroup the coordinator parked.
                    self._leave_group(self.heartbeat.client if stopped else self._group,
                                      "the consumer is closing")
            finally:
                if stopped:
                    self.heartbeat.client.close()
                self._group.close()


def without_moves(assignment, members, counts):
    """An eager assignor's ``assignment`` minus every partition that moves from one member
    that still owns it to another (module doc)."""
    partitions = {(t, p) for t, n in counts.items() for p in range(n)}
    owners = previous_owners(members, partitions)
    if not owners:
        return assignment
    adjusted = {}
    for member_id, topics in assignment.items():
        adjusted[member_id] = {
            topic: [p for p in parts if owners.get((topic, p), member_id) == member_id]
            for topic, parts in topics.items()}
    return adjusted


class HeartbeatThread:
    """Heartbeats and the poll-interval check of one group member (module doc), on its own
    KafkaClient. Started by ConsumerCoordinator; ``stop()`` ends it, then the coordinator
    uses the client for its LeaveGroup and closes it."""

    def __init__(self, coordinator, config, clock):
        self._coordinator = coordinator
        self._member = coordinator.member
        self._config = config
        self._clock = clock
        self._interval = config["heartbeat_interval_ms"] / 1000
        self._max_poll_interval = config["max_poll_interval_ms"] / 1000
        self._retry_backoff = max(config["retry_backoff_ms"] / 1000, 0.01)
        self._request_timeout = config["request_timeout_ms"] / 1000
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(
            target=self._run, daemon=True,
            name=f"heartbeat-{config['group_id']}-{uuid.uuid4().hex[:6]}")
        self.client = None

    def start(self):
        self.client = KafkaClient(self._config, clock=self._clock)
        self._thread.start()

    def wake(self):
        self._wake.set()

    def stop(self, timeout=10.0):
        """End the thread; True once it has ended (its client then belongs to the caller,
        who closes it). Safe to call twice."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _sleep(self, seconds):
        self._wake.wait(max(0.0, seconds))
        self._wake.clear()

    def _run(self):
        next_heartbeat = 0.0
        try:
            while not self._stop.is_set():
                member = self._member
                with member.lock:
                    coordinator, generation = member.coordinator, member.generation
                    member_id, active = member.member_id, member.state in (SYNCING, STABLE)
                    last_poll = member.last_poll
                now = self._clock()
                if not active or generation == NO_GENERATION:
                    self._sleep(self._interval)
                    continue
                if now - last_poll > self._max_poll_interval:
                    self._poll_timeout(now - last_poll)
                    continue
                if coordinator is None:
                    self._sleep(self._retry_backoff)
                    continue
                if now < next_heartbeat:
                    self._sleep(min(next_heartbeat - now,
                                    last_poll + self._max_poll_interval - now + 0.001))
                    continue
                next_heartbeat = now + self._heartbeat(coordinator, generation, member_id)
        except Exception:
            log.exception("group %s: heartbeat thread failed", self._config["group_id"])

    def _poll_timeout(self, idle):
        log.warning("group %s: poll() not called for %.1f s (max_poll_interval_ms %d): "
                    "leaving the group; the next poll rejoins", self._config["group_id"],
                    idle, self._config["max_poll_interval_ms"])
        self._coordinator._leave_group(self.client, "poll timeout expired")
        with self._member.lock:
            self._member.lost = True

    def _heartbeat(self, coordinator, generation, member_id):
        """One Heartbeat; seconds until the next one."""
        request, _ = _build_request(
            ApiKey.HEARTBEAT, "HeartbeatRequest", group_id=self._config["group_id"],
            generation_id=generation, member_id=member_id,
            group_instance_id=self._config["group_instance_id"])
        sent = self._clock()
        future = self.client.send(coordinator, request)
        deadline = sent + self._request_timeout
        while not future.is_done and not self._stop.is_set() and self._clock() < deadline:
            self.client.poll(0.05)
        if not future.is_done:
            return 0.0 if self._stop.is_set() else self._retry_backoff
        if future.failed():
            self._coordinator.coordinator_dead(f"heartbeat: {future.exception}")
            return self._retry_backoff
        self._coordinator.metrics.heartbeat_answered(sent)
        code = int(future.value.error_code)
        if not code:
            return self._interval
        error = for_code(code)
        member = self._member
        with member.lock:
            if member.generation != generation or member.member_id != member_id:
                return 0.0  # answered for a generation gone meanwhile
            log.info("group %s: heartbeat answered %s", self._config["group_id"],
                     error.message)
            if code == RebalanceInProgressError.errno:
                member.rejoin_needed = True
                return self._interval
            if code == UnknownMemberIdError.errno:
                member.reset(member_id_too=True)
            elif code == IllegalGenerationError.errno:
                member.reset(member_id_too=False)
            elif code == FencedInstanceIdError.errno:
                member.fatal = error(f"group {self._config['group_id']!r}: group_instance_id "
                                f"{self._config['group_instance_id']!r} was taken by "
                                f"another consumer")
                member.state = UNJOINED
            elif code in _COORDINATOR_ERRORS:
                member.coordinator = None
            return self._retry_backoff


def _user_data(assignor, owned, generation):
    """The subscription user data ``assignor`` asks for (None if it has no such hook)."""
    hook = getattr(assignor, "subscription_user_data", None)
    return hook(owned, generation) if hook is not None else None


def _protocol(assignor):
    """An assignor's rebalance protocol (a custom one without the attribute is eager)."""
    return getattr(assignor, "rebalance_protocol", "EAGER")
