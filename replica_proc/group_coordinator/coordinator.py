"""Kafka's classic group coordinator (its GroupCoordinator) as a state machine without I/O.

It keeps the groups and committed offsets of the ``__consumer_offsets`` partitions this
broker leads, answers JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DescribeGroups, ListGroups, DeleteGroups and OffsetDelete with Kafka's rules
and Kafka's order of checks (``GroupCoordinator.scala`` / ``GroupMetadataManager.scala``),
and runs the timers of rebalances and sessions. The broker does the I/O around it:

- ``store(partition, [(key, value)], callback(error_code))`` appends records to a
  ``__consumer_offsets`` partition with acks=all and calls back once they are replicated
  (0) or with the append's error code. The coordinator acts on a SyncGroup's assignment,
  a static member's new id or an offset commit only in that callback;
- ``clock_ms()`` is the wall clock of the timestamps written (commit and state times);
- every call passes ``now``, the loop's monotonic clock in seconds; store callbacks, which
  carry no time, use the latest ``now`` seen;
- ``begin_load(p)`` / ``load(p, records, now)`` / ``unload(p)`` follow the partitions'
  leadership; ``error_for(group_id)`` is NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS
  for a group whose partition is not (yet) here. Every request method checks it itself,
  after the group id's validity and before anything else, as Kafka does;
- ``poll(now)`` fires the timers that are due; ``next_deadline()`` says when the next is.

Answers: JoinGroup and SyncGroup wait for a rebalance and answer through ``respond``
(``results.JoinResult`` / ``results.SyncResult``), now or later; OffsetCommit,
DeleteGroups and OffsetDelete answer through ``respond`` once their records are stored;
the others return their answer. A ``respond`` must not call back into the coordinator
(the broker queues the response). Every parked request is answered exactly once: when a
partition is unloaded its parked JoinGroups, SyncGroups and writes get NOT_COORDINATOR.

Rebalance (Kafka's GroupCoordinator.prepareRebalance): a join or a departure moves the group to
PreparingRebalance. An Empty group waits ``group.initial.rebalance.delay.ms`` first, extended by
that much again while new members keep joining, up to the rebalance timeout (Kafka's
InitialDelayedJoin); any other group completes as soon as every member has rejoined, or when the
longest rebalance timeout of its members runs out. Then dynamic members that did not rejoin are
removed, static ones are kept, the generation rises by one, the protocol is voted, the leader stays
if it rejoined (else the first member that did), and every parked JoinGroup is answered
(the leader's with every member's metadata). Members that send no SyncGroup within the
rebalance timeout are removed and the group rebalances (Kafka 3.x's pending-sync rule).

Sessions (Kafka's heartbeat purgatory): a member is removed (and the group rebalances) when no
heartbeat, commit, join or sync refreshed it for its session timeout, unless it is parked in a
JoinGroup or SyncGroup (a new member, whose id the client does not know yet, gets 5 minutes
instead). An id handed out with MEMBER_ID_REQUIRED is pending until its JoinGroup comes back, for at
most the session timeout.

Committed offsets are visible to OffsetFetch once stored; a commit being stored is
not, and with ``require_stable`` its partition answers UNSTABLE_OFFSET_COMMIT (Kafka's
KIP-447 semantics). Offsets expire after ``offsets.retention.minutes`` (of an Empty group:
counted from when it became Empty; of a group without group management: from the commit;
of a Stable consumer group: from the commit, for topics nothing subscribes to), checked
every ``offsets.retention.check.interval.ms``; an Empty group left without offsets is
deleted.

Transactional offsets (TxnOffsetCommit, Kafka's ``handleTxnCommitOffsets``): the group
is checked as an OffsetCommit's (a non-empty id) and created Empty if unknown; v3's
consumer generation, member id and group instance id (KIP-447) are checked as a member's
request when any is given — v0-2 carry none and pass, in any state of the group, as in
Kafka (there is no REBALANCE_IN_PROGRESS for a transactional commit); the offsets are
stored as a transactional batch of the producer (``store(..., producer=(id, epoch))``) and
then kept as the group's *pending transactional offsets* of that producer, invisible to
OffsetFetch (with ``require_stable`` their partitions answer UNSTABLE_OFFSET_COMMIT).
When the producer's COMMIT marker lands on the group's ``__consumer_offsets`` partition
(``complete_transaction``) they become the committed offsets; its ABORT drops them.
``load`` replays the same: ``stored`` may hold ``(key, value, producer id)`` records
(producer id -1 outside a transaction) and ``(None, control type, producer id)`` markers;
an aborted transaction's offsets never become committed, one still open stays pending.
OffsetDelete and DeleteGroups forget the pending transactional offsets they delete (as
Kafka's ``removeOffsets``).
A committed transaction's offset replaces a committed one only if its record was written
after that one's (Kafka's ``completePendingTxnOffsetCommit`` compares the records'
offsets): a plain OffsetCommit written after the TxnOffsetCommit wins, in ``load`` too.
The coordinator orders records by an *append order* (``_append_order``), a counter that
grows with each offset write — the store appends synchronously in the call, so its order is
the log's — and, in ``load``, with each record read (it restarts above what was read).

Differences from Kafka: DeleteGroups and OffsetDelete answer after their tombstones are
stored (Kafka writes them without waiting) and report a failed write; a request Kafka
would leave unanswered is answered: a member removed while its SyncGroup is parked gets
UNKNOWN_MEMBER_ID, a JoinGroup or SyncGroup superseded by the same member's next one
REBALANCE_IN_PROGRESS.

Owner: the broker loop thread, the only caller. Not thread-safe.
"""
from __future__ import annotations

import logging
import uuid

from cluster.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidCommitOffsetSizeError,
    InvalidFetchRequestError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    KafkaStorageError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    RecordListTooLargeError,
    RecordTooLargeError,
    RequestTimedOutError,
    UnknownError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    UnstableOffsetCommitError,
    for_code,
)
from replica_proc.coordinator_common.partitioning import partition_for
from replica_proc.group_coordinator import records
from replica_proc.group_coordinator.group import (
    CONSUMER_PROTOCOL_TYPE,
    Group,
    GroupMember,
    GroupState,
    PendingTxnOffset,
)
from replica_proc.group_coordinator.results import (
    UNKNOWN_GENERATION,
    UNKNOWN_MEMBER_ID,
    CommittedOffset,
    GroupOverview,
    GroupSummary,
    JoinMember,
    JoinResult,
    MemberSummary,
    SyncResult,
)
from replica_proc.group_coordinator.timers import Timers
from segments.record.control_record import ABORT, COMMIT

log = logging.getLogger(__name__)

NONE = 0
#: How long a new member may wait in its first JoinGroup (Kafka's NewMemberJoinTimeoutMs).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

_EMPTY, _PREPARING, _COMPLETING, _STABLE, _DEAD = (
    GroupState.EMPTY, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE, GroupState.DEAD)

#: An append error -> what a SyncGroup (or a static member's JoinGroup) answers (Kafka's
#: ``storeGroup``); other codes pass unchanged.
_GROUP_WRITE_ERRORS = {
    UnknownTopicOrPartitionError.errno: CoordinatorNotAvailableError.errno,
    NotEnoughReplicasError.errno: CoordinatorNotAvailableError.errno,
    NotEnoughReplicasAfterAppendError.errno: CoordinatorNotAvailableError.errno,
    NotLeaderForPartitionError.errno: NotCoordinatorError.errno,
    KafkaStorageError.errno: NotCoordinatorError.errno,
    RequestTimedOutError.errno: RebalanceInProgressError.errno,
    RecordTooLargeError.errno: UnknownError.errno,
    RecordListTooLargeError.errno: UnknownError.errno,
    InvalidFetchRequestError.errno: UnknownError.errno,
}
#: An append error -> what an OffsetCommit answers (Kafka's ``storeOffsets``).
_COMMIT_WRITE_ERRORS = {
    UnknownTopicOrPartitionError.errno: CoordinatorNotAvailableError.errno,
    NotEnoughReplicasError.errno: CoordinatorNotAvailableError.errno,
    NotEnoughReplicasAfterAppendError.errno: CoordinatorNotAvailableError.errno,
    NotLeaderForPartitionError.errno: NotCoordinatorError.errno,
    KafkaStorageError.errno: NotCoordinatorError.errno,
    RecordTooLargeError.errno: InvalidCommitOffsetSizeError.errno,
    RecordListTooLargeError.errno: InvalidCommitOffsetSizeError.errno,
    InvalidFetchRequestError.errno: InvalidCommitOffsetSizeError.errno,
}

#: The answer to a JoinGroup parked by a member that sent another one (Kafka leaves the first
#: unanswered; here every request gets an answer, one that only makes a client join again).
_SUPERSEDED_JOIN = JoinResult(RebalanceInProgressError.errno, UNKNOWN_MEMBER_ID)

# Timer keys: (kind, group id, ...).
_JOIN = "join"  # the rebalance in progress completes (or its initial delay ends)
_SYNC = "sync"  # (.., generation): members that did not sync by then are removed
_SESSION = "session"  # (.., member id): the member's session runs out
_PENDING = "pending"  # (.., member id): a pending member that never came back
_RETENTION = ("retention",)  # the next offsets-retention check


def _utf16_length(text):
    """Java's ``String.length()`` of ``text`` (offset.metadata.max.bytes counts it)."""
    return len(text.encode("utf-16-le")) // 2


def _warn_if_failed(what):
    """A store callback for a write nobody waits for: a failure is logged."""
    def callback(error):
        if error != NONE:
            log.warning("%s: writing to __consumer_offsets failed with error %d", what, error)
    return callback


class _Write:
    """A store the coordinator waits for; ``on_unload`` answers its requester if the
    partition leaves first (the later callback is then ignored)."""

    __slots__ = ("on_done", "on_unload", "done")

    def __init__(self, on_done, on_unload):
        self.on_done = on_done
        self.on_unload = on_unload
        self.done = False


class GroupCoordinator:
    """The groups of the ``__consumer_offsets`` partitions this broker leads (module doc)."""

    def __init__(self, config, store, clock_ms, partitions_count=None):
        self._min_session_ms = config["group.min.session.timeout.ms"]
        self._max_session_ms = config["group.max.session.timeout.ms"]
        self._initial_delay_ms = config["group.initial.rebalance.delay.ms"]
        self._max_size = config["group.max.size"]
        self._retention_ms = config["offsets.retention.minutes"] * 60_000
        self._retention_check_s = config["offsets.retention.check.interval.ms"] / 1000
        self._max_metadata = config["offset.metadata.max.bytes"]
        #: The partition count of ``__consumer_offsets`` (the topic's, once it exists).
        self.partitions_count = partitions_count or config["offsets.topic.num.partitions"]
        self._store_records = store
        self._clock_ms = clock_ms
        self._groups = {}  # group id -> Group, of owned partitions only (never Dead)
        self._owned = set()
        self._loading = set()
        self._writes = {}  # partition -> {_Write} waiting for the store
        self._timers = Timers()
        self._now = 0.0
        #: The append order of the next offset record (module doc).
        self._append_order = 0

    # -- partitions ---------------------------------------------------------------------

    def partition_of(self, group_id):
        return partition_for(group_id, self.partitions_count)

    def error_for(self, group_id):
        """None if this coordinator holds ``group_id``'s partition (of ``partitions_count``,
        the one count every group is placed by), else the error code:
        COORDINATOR_LOAD_IN_PROGRESS while it loads, NOT_COORDINATOR otherwise."""
        partition = self.partition_of(group_id)
        if partition in self._loading:
            return CoordinatorLoadInProgressError.errno
        if partition not in self._owned:
            return NotCoordinatorError.errno
        return None

    def begin_load(self, partition):
        """This broker became leader of ``partition``: its groups load (requests for them
        get COORDINATOR_LOAD_IN_PROGRESS until ``load``)."""
        if partition in self._owned:
            raise ValueError(f"__consumer_offsets partition {partition} is already loaded")
        self._loading.add(partition)

    def load(self, partition, stored, now):
        """Rebuild the groups and offsets of ``partition`` from its records ``stored``,
        ``[(key bytes, value bytes or None)]`` in offset order: the last record of a key
        wins, a tombstone deletes, a record that does not decode is skipped (logged). Loaded
        members' sessions start now."""
        if partition in self._owned:
            raise ValueError(f"__consumer_offsets partition {partition} is already loaded")
        self._now = now
        metadata, offsets = {}, {}
        orders = {}  # group id -> {(topic, partition): append order of the offset's record}
        pending = {}  # producer id -> {group id: {(topic, partition): PendingTxnOffset}}
        for position, entry in enumerate(stored):
            key_bytes, value_bytes, producer_id = entry if len(entry) == 3 else (*entry, -1)
            if key_bytes is None:  # a transaction's marker
                transaction = pending.pop(producer_id, {})
                if value_bytes == COMMIT:
                    for group_id, committed in transaction.items():
                        _commit_txn_offsets(offsets.setdefault(group_id, {}),
                                            orders.setdefault(group_id, {}), committed)
                elif value_bytes != ABORT:
                    pending[producer_id] = transaction  # not a transaction's end
                continue
            try:
                key = records.decode_key(key_bytes)
                value = records.decode_value(key, value_bytes)
            except ValueError as exc:
                log.error("__consumer_offsets-%d: record %d skipped: %s", partition, position,
                          exc)
                continue
            if isinstance(key, records.OffsetCommitKey) and producer_id >= 0:
                if value is not None:
                    pending.setdefault(producer_id, {}).setdefault(key.group, {})[
                        (key.topic, key.partition)] = PendingTxnOffset(value, position)
            elif isinstance(key, records.OffsetCommitKey):
                group_offsets = offsets.setdefault(key.group, {})
                if value is None:
                    group_offsets.pop((key.topic, key.partition), None)
                else:
                    group_offsets[(key.topic, key.partition)] = value
                    orders.setdefault(key.group, {})[(key.topic, key.partition)] = position
            elif value is None:
                metadata.pop(key.group, None)
            else:
                metadata[key.group] = value
        open_groups = {g for transaction in pending.values() for g in transaction}
        for group_id in metadata.keys() | {g for g, o in offsets.items() if o} | open_groups:
            group = self._loaded_group(group_id, partition, metadata.get(group_id))
            group.offsets = offsets.get(group_id, {})
            group.offset_orders = orders.get(group_id, {})
            group.pending_txn_offsets = {
                producer_id: dict(transaction[group_id])
                for producer_id, transaction in pending.items() if group_id in transaction}
            self._groups[group_id] = group
            if len(group.members) > self._max_size:
                # group.max.size was lowered: members must rejoin (the first ones stay).
                self._prepare_rebalance(now, group, "a freshly loaded group is over capacity "
                                                    f"({self._max_size})")
            for member in group.members.values():
                self._schedule_session(now, group, member)
        self._append_order = max(self._append_order, len(stored))
        self._loading.discard(partition)
        self._owned.add(partition)
        if _RETENTION not in self._timers:
            self._timers.set(_RETENTION, now + self._retention_check_s)

    def _loaded_group(self, group_id, partition, value):
        group = Group(group_id, partition)
        if value is None:  # offsets only: a group without group management
            group.state_timestamp = self._clock_ms()
            return group
        group.protocol_type = value.protocol_type or None
        group.generation = value.generation
        group.protocol = value.protocol
        group.leader = value.leader
        group.state_timestamp = value.current_state_timestamp
        for m in value.members:
            group.add(GroupMember(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.session_timeout, m.rebalance_timeout, group.protocol_type,
                [(value.protocol, m.subscription)], assignment=m.assignment))
        group.state = _STABLE if group.members else _EMPTY
        return group

    def unload(self, partition):
        """This broker no longer leads ``partition``: its groups are dropped; their parked
        JoinGroups, SyncGroups and writes are answered NOT_COORDINATOR."""
        self._owned.discard(partition)
        self._loading.discard(partition)
        for write in self._writes.pop(partition, ()):
            write.done = True
            write.on_unload()
        for group in [g for g in self._groups.values() if g.partition == partition]:
            log.info("unloading group %s (generation %d)", group.group_id, group.generation)
            self._drop(group)
            for member in group.members.values():
                self._answer_join(member, JoinResult.failed(member.member_id,
                                                            NotCoordinatorError.errno))
                self._answer_sync(member, SyncResult(NotCoordinatorError.errno))

    def _drop(self, group):
        """Forget ``group`` (Dead) and its timers."""
        group.transition(_DEAD, self._clock_ms())
        del self._groups[group.group_id]
        self._timers.cancel((_JOIN, group.group_id))
        self._timers.cancel((_SYNC, group.group_id, group.generation))
        for member_id in list(group.members) + list(group.pending_members):
            self._timers.cancel((_SESSION, group.group_id, member_id))
            self._timers.cancel((_PENDING, group.group_id, member_id))

    # -- timers -------------------------------------------------------------------------

    def poll(self, now):
        """Run every timer due by ``now``: rebalance and initial-delay deadlines, session
        and pending-member expiry, pending syncs, offsets retention."""
        self._now = now
        while (key := self._timers.pop_due(now)) is not None:
            if key == _RETENTION:
                self._expire_offsets()
                self._timers.set(_RETENTION, now + self._retention_check_s)
                continue
            group = self._groups[key[1]]  # a group's timers go with it (_drop)
            if key[0] == _JOIN:
                self._on_join_deadline(now, group)
            elif key[0] == _SESSION:
                self._on_session_expired(now, group, key[2])
            elif key[0] == _PENDING:
                log.info("pending member %s of group %s removed: it did not rejoin", key[2],
                         group.group_id)
                self._remove_pending(now, group, key[2])
            else:
                self._on_sync_deadline(now, group, key[2])

    def next_deadline(self):
        """The monotonic time of the next timer, or None."""
        return self._timers.next_deadline()

    def _schedule_session(self, now, group, member, timeout_ms=None):
        timeout_ms = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self._timers.set((_SESSION, group.group_id, member.member_id), now + timeout_ms / 1000)

    def _on_session_expired(self, now, group, member_id):
        member = group.members.get(member_id)
        if member is None or member.satisfied_without_heartbeat():
            return
        log.info("member %s of group %s failed (session timeout), removing it", member_id,
                 group.group_id)
        self._remove_member(now, group, member)

    def _on_sync_deadline(self, now, group, generation):
        # Set when a generation forms, cancelled when the next rebalance starts.
        if not group.pending_sync:
            return
        missing = sorted(group.pending_sync)
        log.info("group %s: members %s sent no SyncGroup for generation %d, removing them",
                 group.group_id, missing, generation)
        for member_id in missing:
            self._remove_silently(group, member_id)
        self._prepare_rebalance(now, group, "pending members did not sync")

    # -- JoinGroup ----------------------------------------------------------------------

    def join_group(self, now, group_id, member_id, group_instance_id, client_id, client_host,
                   session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols,
                   require_known_member_id, respond):
        """JoinGroup (Kafka's GroupCoordinator.handleJoinGroup; static members, KIP-345):
        ``respond(JoinResult)``, now or when the rebalance completes. ``protocols`` = [(name,
        metadata bytes)] in preference order; ``require_known_member_id`` is true from JoinGroup v4
        on."""
        self._now = now
        error = self._group_error(group_id)
        if error is None and not self._min_session_ms <= session_timeout_ms <= \
                self._max_session_ms:
            error = InvalidSessionTimeoutError.errno
        if error is not None:
            respond(JoinResult.failed(member_id, error))
            return
        protocols = [(name, bytes(metadata)) for name, metadata in protocols]
        new_member = member_id == UNKNOWN_MEMBER_ID
        group = self._groups.get(group_id)
        if group is None:
            if not new_member:
                respond(JoinResult.failed(member_id, UnknownMemberIdError.errno))
                return
            group = self._create_group(group_id)
        request = (client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                   protocol_type, protocols, respond)
        if not self._accepts(group, member_id):
            # Kafka drops the member (a rebalance may complete without it).
            if member_id in group.members:
                self._remove_silently(group, member_id)
            elif member_id in group.pending_members:
                self._remove_pending(now, group, member_id)
            respond(JoinResult.failed(UNKNOWN_MEMBER_ID, GroupMaxSizeReachedError.errno))
        elif new_member:
            self._join_new_member(now, group, group_instance_id, require_known_member_id,
                                  *request)
        else:
            self._join_known_member(now, group, member_id, group_instance_id, *request)
        self._check_join(now, group)

    def _accepts(self, group, member_id):
        """Kafka's ``acceptJoiningMember``: group.max.size counts the members parked in a
        JoinGroup while preparing, the members otherwise."""
        if group.is_(_EMPTY):
            return True
        if group.is_(_PREPARING):
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join is not None) or \
                group.awaiting_join_count() < self._max_size
        return member_id in group.members or len(group.members) < self._max_size

    def _join_new_member(self, now, group, group_instance_id, require_known_member_id,
                         client_id, client_host, session_ms, rebalance_ms, protocol_type,
                         protocols, respond):
        if not group.supports(protocol_type, protocols):
            respond(JoinResult.failed(UNKNOWN_MEMBER_ID, InconsistentGroupProtocolError.errno))
            return
        member_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"
        if group_instance_id is not None:
            old_id = group.static_members.get(group_instance_id)
            if old_id is not None:
                self._replace_static_member(now, group, old_id, member_id, protocols,
                                            rebalance_ms, session_ms, respond)
                return
        elif require_known_member_id:
            group.pending_members.add(member_id)
            self._timers.set((_PENDING, group.group_id, member_id), now + session_ms / 1000)
            respond(JoinResult.failed(member_id, MemberIdRequiredError.errno))
            return
        self._add_member(now, group, member_id, group_instance_id, client_id, client_host,
                         session_ms, rebalance_ms, protocol_type, protocols, respond)

    def _join_known_member(self, now, group, member_id, group_instance_id, client_id,
                           client_host, session_ms, rebalance_ms, protocol_type, protocols,
                           respond):
        if not group.supports(protocol_type, protocols):
            respond(JoinResult.failed(member_id, InconsistentGroupProtocolError.errno))
        elif member_id in group.pending_members:
            if group_instance_id is not None:  # Kafka: an IllegalStateException
                respond(JoinResult.failed(member_id, UnknownError.errno))
                return
            self._add_member(now, group, member_id, None, client_id, client_host, session_ms,
                             rebalance_ms, protocol_type, protocols, respond)
        elif (error := self._member_error(group, member_id, group_instance_id)) is not None:
            respond(JoinResult.failed(member_id, error))
        else:
            member = group.members[member_id]
            unchanged = member.same_protocols(protocols)
            if group.is_(_COMPLETING) and unchanged:
                # Its JoinGroup response was lost: the generation as it is.
                respond(self._generation_result(group, member_id))
            elif group.is_(_STABLE) and unchanged and group.leader != member_id:
                respond(self._generation_result(group, member_id))
            else:
                # Preparing; or new metadata; or the leader rejoining a Stable group (which
                # is how a leader asks for a rebalance, e.g. for new topic partitions).
                self._update_member(member, protocols, rebalance_ms, session_ms, respond)
                self._maybe_prepare_rebalance(now, group, f"member {member_id} rejoined")

    def _generation_result(self, group, member_id):
        members = ()
        if group.leader == member_id:
            members = tuple(JoinMember(*m) for m in group.member_metadata())
        return JoinResult(NONE, member_id, group.generation, group.protocol_type,
                          group.protocol, group.leader, members)

    def _update_member(self, member, protocols, rebalance_ms, session_ms, respond):
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_ms
        member.session_timeout_ms = session_ms
        self._answer_join(member, _SUPERSEDED_JOIN)
        member.awaiting_join = respond

    def _add_member(self, now, group, member_id, group_instance_id, client_id, client_host,
                    session_ms, rebalance_ms, protocol_type, protocols, respond):
        member = GroupMember(member_id, group_instance_id, client_id, client_host, session_ms,
                             rebalance_ms, protocol_type, protocols, awaiting_join=respond,
                             is_new=True)
        if group.is_(_PREPARING) and group.generation == 0:
            group.new_member_added = True
        group.add(member)
        self._timers.cancel((_PENDING, group.group_id, member_id))
        # The client cannot heartbeat before it learns its id: a bound on the first join.
        self._schedule_session(now, group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(now, group, f"member {member_id} joined")

    def _replace_static_member(self, now, group, old_id, new_id, protocols, rebalance_ms,
                               session_ms, respond):
        """A static member came back without its id (KIP-345): ``new_id`` replaces ``old_id``
        (fenced from now on). In Stable, when the group's protocol would stay the same, the
        new id is stored and the member gets the current generation without a rebalance
        (and the old leader id, so that it does not run an assignment nobody would use)."""
        group_id = group.group_id
        old_leader = group.leader
        old = group.members[old_id]
        self._answer_join(old, JoinResult.failed(old_id, FencedInstanceIdError.errno))
        self._answer_sync(old, SyncResult(FencedInstanceIdError.errno))
        member = group.replace_static(old_id, new_id)
        self._timers.cancel((_SESSION, group_id, old_id))
        self._schedule_session(now, group, member)
        previous = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        self._update_member(member, protocols, rebalance_ms, session_ms, respond)
        if group.is_(_COMPLETING):
            # The leader may be assigning to the old id: assign again.
            self._prepare_rebalance(now, group, f"static member {new_id} replaced {old_id}")
        elif group.is_(_STABLE):
            if group.select_protocol() != group.protocol:
                self._prepare_rebalance(now, group, f"static member {new_id} changes the "
                                                    "group's protocol")
                return

            def stored(error):
                if member.awaiting_join is not respond or not group.is_(_STABLE):
                    return  # answered meanwhile, or a rebalance will answer it
                if error == NONE:
                    self._answer_join(member, JoinResult(
                        NONE, new_id, group.generation, group.protocol_type, group.protocol,
                        old_leader))
                    return
                member.awaiting_join = None
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = \
                    previous
                group.replace_static(new_id, old_id)
                self._timers.cancel((_SESSION, group_id, new_id))
                self._schedule_session(self._now, group, member)
                respond(JoinResult(_GROUP_WRITE_ERRORS.get(error, error), UNKNOWN_MEMBER_ID,
                                   group.generation, group.protocol_type, group.protocol,
                                   old_leader))

            self._store_group(group, {m.member_id: m.assignment
                                      for m in group.members.values()}, stored)

    # -- rebalance ----------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, now, group, reason):
        if group.is_(_EMPTY, _STABLE, _COMPLETING):
            self._prepare_rebalance(now, group, reason)

    def _prepare_rebalance(self, now, group, reason):
        if group.is_(_COMPLETING):
            self._reset_assignments(now, group, RebalanceInProgressError.errno)
        self._timers.cancel((_SYNC, group.group_id, group.generation))
        if group.is_(_EMPTY):
            group.initial_delay_ms = self._initial_delay_ms
            group.initial_remaining_ms = max(
                group.rebalance_timeout_ms() - self._initial_delay_ms, 0)
            group.new_member_added = False
            delay_ms = self._initial_delay_ms
        else:
            group.initial_delay_ms = None
            delay_ms = group.rebalance_timeout_ms()
        self._timers.set((_JOIN, group.group_id), now + delay_ms / 1000)
        group.transition(_PREPARING, self._clock_ms())
        log.info("preparing to rebalance group %s in generation %d: %s", group.group_id,
                 group.generation, reason)
        self._check_join(now, group)

    def _check_join(self, now, group):
        """Complete the rebalance if every member has rejoined (not during an initial
        delay, which always runs its course)."""
        if group.is_(_PREPARING) and group.initial_delay_ms is None and group.all_rejoined():
            self._complete_join(now, group)

    def _on_join_deadline(self, now, group):
        # The timer is set in PreparingRebalance only and cancelled when it ends.
        if group.initial_delay_ms is not None and group.new_member_added and \
                group.initial_remaining_ms:
            group.new_member_added = False
            delay_ms = min(self._initial_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - group.initial_delay_ms,
                                             0)
            group.initial_delay_ms = delay_ms
            self._timers.set((_JOIN, group.group_id), now + delay_ms / 1000)
            return
        self._complete_join(now, group)

    def _complete_join(self, now, group):
        group_id = group.group_id
        self._timers.cancel((_JOIN, group_id))
        group.initial_delay_ms = None
        for member in group.not_yet_rejoined():
            if not member.is_static:
                log.info("group %s: member %s did not rejoin in time, removing it", group_id,
                         member.member_id)
                self._remove_silently(group, member.member_id)
        if group.members and not self._elect_joined_leader(group):
            log.error("group %s could not complete its rebalance: no member rejoined",
                      group_id)
            self._timers.set((_JOIN, group_id), now + group.rebalance_timeout_ms() / 1000)
            return
        group.generation += 1
        if not group.members:
            group.protocol = None
            group.transition(_EMPTY, self._clock_ms())
            log.info("group %s with generation %d is now empty", group_id, group.generation)
            # Should the write fail, the previous generation comes back after a failover and
            # times out: no member can be hurt by it (Kafka only warns as well).
            self._store_group(group, {}, _warn_if_failed(f"group {group_id}'s empty generation"))
            return
        group.protocol = group.select_protocol()
        group.transition(_COMPLETING, self._clock_ms())
        log.info("group %s: generation %d with %d member(s), protocol %s", group_id,
                 group.generation, len(group.members), group.protocol)
        for member in list(group.members.values()):
            self._answer_join(member, self._generation_result(group, member.member_id))
            self._schedule_session(now, group, member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        self._timers.set((_SYNC, group_id, group.generation),
                         now + group.rebalance_timeout_ms() / 1000)

    @staticmethod
    def _elect_joined_leader(group):
        """Keep the leader if it rejoined, else take the first member that did; False when
        none did (Kafka's ``maybeElectNewJoinedLeader``)."""
        if group.members[group.leader].awaiting_join is not None:
            return True
        for member in group.members.values():
            if member.awaiting_join is not None:
                group.leader = member.member_id
                return True
        return False

    # -- SyncGroup ----------------------------------------------------------------------

    def sync_group(self, now, group_id, generation, member_id, group_instance_id,
                   protocol_type, protocol_name, assignments, respond):
        """SyncGroup: ``respond(SyncResult)``. The leader's ``assignments`` ({member id:
        bytes}; members it left out get none) are stored first; only then does every
        member get its assignment and the group become Stable."""
        self._now = now
        error = self._group_error(group_id)
        if error == CoordinatorLoadInProgressError.errno:
            error = RebalanceInProgressError.errno  # the rebalance state was lost: rejoin
        group = self._groups.get(group_id)
        if error is None:
            error = self._member_error(group, member_id, group_instance_id, generation)
        if error is None and (
                (protocol_type is not None and protocol_type != group.protocol_type) or
                (protocol_name is not None and protocol_name != group.protocol)):
            error = InconsistentGroupProtocolError.errno
        if error is None and group.is_(_PREPARING):
            error = RebalanceInProgressError.errno
        if error is not None:
            respond(SyncResult(error))
            return
        member = group.members[member_id]
        group.pending_sync.discard(member_id)
        if group.is_(_STABLE):
            respond(SyncResult(NONE, group.protocol_type, group.protocol, member.assignment))
            self._schedule_session(now, group, member)
            return
        self._answer_sync(member, SyncResult(RebalanceInProgressError.errno))  # superseded
        member.awaiting_sync = respond
        if member_id != group.leader:
            return
        missing = [m for m in group.members if m not in assignments]
        if missing:
            log.warning("group %s generation %d: empty assignments for members %s",
                        group_id, generation, missing)
        assignment = {m: bytes(assignments.get(m, b"")) for m in group.members}

        def stored(error):
            if not group.is_(_COMPLETING) or group.generation != generation:
                return  # a rebalance (or an unload) answered the members meanwhile
            if error != NONE:
                self._reset_assignments(self._now, group, _GROUP_WRITE_ERRORS.get(error, error))
                self._maybe_prepare_rebalance(self._now, group, "storing the assignment "
                                                                f"failed (error {error})")
                return
            for m in group.members.values():
                m.assignment = assignment[m.member_id]
            self._propagate(self._now, group, NONE)
            group.transition(_STABLE, self._clock_ms())
            log.info("group %s is stable in generation %d", group_id, generation)

        self._store_group(group, assignment, stored)

    def _reset_assignments(self, now, group, error):
        for member in group.members.values():
            member.assignment = b""
        self._propagate(now, group, error)

    def _propagate(self, now, group, error):
        for member in group.members.values():
            result = SyncResult(error) if error else SyncResult(
                NONE, group.protocol_type, group.protocol, member.assignment)
            if self._answer_sync(member, result):
                # Its session may have run out while it waited: count it from now.
                self._schedule_session(now, group, member)

    # -- Heartbeat and LeaveGroup ---------------------------------------------------------

    def heartbeat(self, now, group_id, generation, member_id, group_instance_id):
        """Heartbeat (Kafka's GroupCoordinator.handleHeartbeat): the error code (0 = fine;
        REBALANCE_IN_PROGRESS = rejoin). While the group loads the answer is 0, as Kafka answers."""
        self._now = now
        error = self._group_error(group_id)
        if error == CoordinatorLoadInProgressError.errno:
            return NONE
        if error is not None:
            return error
        group = self._groups.get(group_id)
        error = self._member_error(group, member_id, group_instance_id, generation)
        if error is not None:
            return error
        self._schedule_session(now, group, group.members[member_id])
        return RebalanceInProgressError.errno if group.is_(_PREPARING) else NONE

    def leave_group(self, now, group_id, members):
        """LeaveGroup v3+: ``members`` = [(member id, group instance id)]; a member id ""
        with an instance id removes that static member (an administrator's removal).
        Returns (top error, [(member id, group instance id, error)])."""
        self._now = now
        error = self._group_error(group_id)
        if error is not None:
            return error, []
        group = self._groups.get(group_id)
        if group is None:
            return NONE, [(m, i, UnknownMemberIdError.errno) for m, i in members]
        answers = []
        for member_id, instance_id in members:
            if member_id == UNKNOWN_MEMBER_ID:
                current = group.static_members.get(instance_id) if instance_id else None
                error = UnknownMemberIdError.errno if current is None else NONE
                if current is not None:
                    self._remove_member(now, group, group.members[current])
            elif member_id in group.pending_members:
                self._remove_pending(now, group, member_id)
                error = NONE
            else:
                error = self._member_error(group, member_id, instance_id) or NONE
                if error == NONE:
                    self._remove_member(now, group, group.members[member_id])
            if error == NONE:
                log.info("member %s (instance %s) left group %s", member_id, instance_id,
                         group_id)
            answers.append((member_id, instance_id, error))
        return NONE, answers

    @staticmethod
    def _member_error(group, member_id, group_instance_id, generation=None):
        """Kafka's checks of a member's request, in order (``validateCurrentMember``, then
        the generation when one is given): a group instance id held by another member id is
        FENCED_INSTANCE_ID, one nobody holds UNKNOWN_MEMBER_ID; an unknown member id
        UNKNOWN_MEMBER_ID; another generation ILLEGAL_GENERATION."""
        if group is None:
            return UnknownMemberIdError.errno
        if group_instance_id is not None:
            current = group.static_members.get(group_instance_id)
            if current is None:
                return UnknownMemberIdError.errno
            if current != member_id:
                return FencedInstanceIdError.errno
        if member_id not in group.members:
            return UnknownMemberIdError.errno
        if generation is not None and generation != group.generation:
            return IllegalGenerationError.errno
        return None

    def _remove_member(self, now, group, member):
        """A member leaves or fails: removed, and the group rebalances."""
        self._remove_silently(group, member.member_id)
        if group.is_(_STABLE, _COMPLETING):
            self._maybe_prepare_rebalance(now, group, f"member {member.member_id} left")
        else:
            self._check_join(now, group)

    def _remove_silently(self, group, member_id):
        """Remove a member without starting a rebalance; a JoinGroup or SyncGroup it has
        parked gets UNKNOWN_MEMBER_ID (so a client still alive joins again)."""
        member = group.remove(member_id)
        self._timers.cancel((_SESSION, group.group_id, member_id))
        self._answer_join(member, JoinResult.failed(UNKNOWN_MEMBER_ID,
                                                    UnknownMemberIdError.errno))
        self._answer_sync(member, SyncResult(UnknownMemberIdError.errno))

    def _remove_pending(self, now, group, member_id):
        group.remove(member_id)
        self._timers.cancel((_PENDING, group.group_id, member_id))
        self._check_join(now, group)

    @staticmethod
    def _answer_join(member, result):
        respond, member.awaiting_join = member.awaiting_join, None
        if respond is not None:
            respond(result)
        return respond is not None

    @staticmethod
    def _answer_sync(member, result):
        respond, member.awaiting_sync = member.awaiting_sync, None
        if respond is not None:
            respond(result)
        return respond is not None

    # -- offsets ------------------------------------------------------------------------

    def commit_offsets(self, now, group_id, generation, member_id, group_instance_id, offsets,
                       respond):
        """OffsetCommit (Kafka's GroupCoordinator.handleCommitOffsets): ``offsets`` = {(topic,
        partition): (offset, leader epoch, metadata or None)}; ``respond({(topic, partition):
        error})`` once stored. Generation -1 commits for a group without group management: accepted
        while the group is Empty (or does not exist: it is created Empty); to an active group only
        its members commit (UNKNOWN_MEMBER_ID, as Kafka 3.7+ answers; older brokers said
        ILLEGAL_GENERATION)."""
        self._now = now

        def answer(error):
            respond({tp: error for tp in offsets})

        error = self._group_error(group_id, empty_id_ok=True)
        if error is not None:
            return answer(error)
        group = self._groups.get(group_id)
        if group is None:
            if generation >= 0:
                return answer(IllegalGenerationError.errno)
            group = self._create_group(group_id)
        if generation < 0 and group.is_(_EMPTY):
            error = None  # an admin client, or a consumer without group management
        elif generation >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._member_error(group, member_id, group_instance_id, generation)
        else:
            error = UnknownMemberIdError.errno  # only members commit to an active group
        if error is None and group.is_(_COMPLETING):
            error = RebalanceInProgressError.errno
        if error is not None:
            return answer(error)
        if member_id in group.members:  # Stable or PreparingRebalance: a sign of life
            self._schedule_session(now, group, group.members[member_id])
        self._store_offsets(group, offsets, respond)

    def commit_transactional_offsets(self, now, group_id, producer_id, producer_epoch,
                                     offsets, respond, generation=UNKNOWN_GENERATION,
                                     member_id=UNKNOWN_MEMBER_ID, group_instance_id=None):
        """TxnOffsetCommit (module doc): ``offsets`` as ``commit_offsets``';
        ``respond({(topic, partition): error})`` once stored — pending in the producer's
        transaction until ``complete_transaction``. v3's ``generation``, ``member_id`` and
        ``group_instance_id`` (KIP-447: the consumer's ``group_metadata()``) are checked
        as a member's when any is given (FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID,
        ILLEGAL_GENERATION: a zombie that lost its partitions in a rebalance cannot commit
        for them); v0-2's defaults pass, whatever the group's state."""
        self._now = now
        error = self._group_error(group_id)
        if error is not None:
            respond({tp: error for tp in offsets})
            return
        group = self._groups.get(group_id) or self._create_group(group_id)
        if generation >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._member_error(group, member_id, group_instance_id, generation)
            if error is not None:
                log.info("group %s: TxnOffsetCommit of producer %d by member %s "
                         "(instance %s, generation %d) refused: %s", group_id, producer_id,
                         member_id, group_instance_id, generation, for_code(error).__name__)
                respond({tp: error for tp in offsets})
                return
        self._store_offsets(group, offsets, respond, (producer_id, producer_epoch))

    def complete_transaction(self, partition, producer_id, commit):
        """The COMMIT (``commit``) or ABORT marker of ``producer_id`` landed on
        ``__consumer_offsets`` partition ``partition``: its pending transactional offsets
        become the committed offsets of their groups — each unless a later record (a plain
        OffsetCommit written after it) holds the committed offset — or are dropped."""
        if partition not in self._owned:
            return
        for group in list(self._groups.values()):
            if group.partition != partition:
                continue
            transaction = group.pending_txn_offsets.pop(producer_id, None)
            if transaction and commit:
                _commit_txn_offsets(group.offsets, group.offset_orders, transaction)

    def _store_offsets(self, group, offsets, respond, producer=None):
        timestamp = self._clock_ms()
        too_large = set()
        values = {}
        for tp, (offset, leader_epoch, metadata) in offsets.items():
            metadata = metadata or ""
            if _utf16_length(metadata) > self._max_metadata:
                too_large.add(tp)
            else:
                values[tp] = records.OffsetCommitValue(offset, metadata, timestamp,
                                                       leader_epoch)
        if not values:
            respond({tp: OffsetMetadataTooLargeError.errno for tp in offsets})
            return
        group.pending_commits.update(values)
        order = self._append_order
        self._append_order += 1

        def stored(error):
            for tp, value in values.items():
                if group.pending_commits.get(tp) is value:
                    del group.pending_commits[tp]
            if error == NONE and self._groups.get(group.group_id) is group:
                if producer is None:
                    group.offsets.update(values)
                    group.offset_orders.update(dict.fromkeys(values, order))
                else:
                    group.pending_txn_offsets.setdefault(producer[0], {}).update(
                        {tp: PendingTxnOffset(value, order) for tp, value in values.items()})
            code = _COMMIT_WRITE_ERRORS.get(error, error)
            respond({tp: OffsetMetadataTooLargeError.errno if tp in too_large else code
                     for tp in offsets})

        def unloaded():
            respond({tp: NotCoordinatorError.errno for tp in offsets})

        pairs = [(records.encode_key(records.OffsetCommitKey(group.group_id, *tp)),
                  records.encode_value(value)) for tp, value in values.items()]
        self._write(group.partition, pairs, stored, unloaded, producer)

    def fetch_offsets(self, group_id, partitions=None, require_stable=False):
        """OffsetFetch: (error, {(topic, partition): CommittedOffset}) for ``partitions``,
        or every partition with a committed offset when None. A commit still being stored is
        not visible; with ``require_stable`` its partition answers UNSTABLE_OFFSET_COMMIT."""
        error = self._group_error(group_id, empty_id_ok=True)
        if error is not None:
            return error, {}
        group = self._groups.get(group_id)
        if group is None:
            return NONE, {tp: CommittedOffset() for tp in partitions or ()}
        answer = {}
        for tp in group.offsets if partitions is None else partitions:
            value = group.offsets.get(tp)
            if require_stable and (tp in group.pending_commits or any(
                    tp in txn for txn in group.pending_txn_offsets.values())):
                answer[tp] = CommittedOffset(error=UnstableOffsetCommitError.errno)
            elif value is None:
                answer[tp] = CommittedOffset()
            else:
                answer[tp] = CommittedOffset(value.offset, value.leader_epoch, value.metadata)
        return NONE, answer

    def delete_offsets(self, group_id, partitions, respond):
        """OffsetDelete: ``respond(group error, {(topic, partition): error})``. An Empty
        group's offsets go; an active consumer group's go unless a member subscribes to
        their topic (GROUP_SUBSCRIBED_TO_TOPIC); other active groups: NON_EMPTY_GROUP."""
        error = self._group_error(group_id)
        group = self._groups.get(group_id)
        if error is None and group is None:
            error = GroupIdNotFoundError.errno
        if error is None and not group.is_(_EMPTY) and \
                group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            error = NonEmptyGroupError.errno
        if error is not None:
            respond(error, {})
            return
        subscribed = set() if group.is_(_EMPTY) else group.subscribed_topics()
        answers = {tp: GroupSubscribedToTopicError.errno for tp in partitions
                   if tp[0] in subscribed}
        eligible = [tp for tp in partitions if tp not in answers]
        for tp in eligible:
            group.pending_commits.pop(tp, None)  # Kafka's removeOffsets forgets them too
            for transaction in group.pending_txn_offsets.values():
                transaction.pop(tp, None)
        removed = [tp for tp in eligible if group.offsets.pop(tp, None) is not None]
        for tp in removed:
            del group.offset_orders[tp]

        def stored(error):
            code = _GROUP_WRITE_ERRORS.get(error, error)
            respond(NONE, {**answers, **{tp: code for tp in eligible}})

        if not self._tombstone(group, removed, stored, lambda: respond(
                NotCoordinatorError.errno, {})):
            stored(NONE)

    def _tombstone(self, group, offsets, on_done, on_unload):
        """Delete ``offsets`` of ``group`` in the log, and the group itself if it is Empty
        with no offsets left (Kafka's ``cleanupGroupMetadata``: it is dropped here at once;
        a group that never had a generation has no record to delete). False when there was
        nothing to write."""
        pairs = [(records.encode_key(records.OffsetCommitKey(group.group_id, *tp)), None)
                 for tp in offsets]
        if group.is_(_EMPTY) and not group.offsets and not group.pending_commits and \
                not group.pending_txn_offsets:
            log.info("group %s (generation %d) is dead", group.group_id, group.generation)
            self._drop(group)
            if group.generation > 0:
                pairs.append((records.encode_key(records.GroupMetadataKey(group.group_id)),
                              None))
        if not pairs:
            return False
        self._write(group.partition, pairs, on_done, on_unload)
        return True

    def _expire_offsets(self):
        now_ms = self._clock_ms()
        for group in list(self._groups.values()):
            expired = self._expired(group, now_ms)
            for tp in expired:
                del group.offsets[tp]
                group.offset_orders.pop(tp, None)
            if expired:
                log.info("group %s: %d offset(s) expired", group.group_id, len(expired))
            # A tombstone lost is written again by a later check.
            self._tombstone(group, expired,
                            _warn_if_failed(f"group {group.group_id}'s expired offsets"),
                            lambda: None)

    def _expired(self, group, now_ms):
        """The offsets of ``group`` past retention (Kafka's ``removeExpiredOffsets``)."""
        def commit_time(value):
            return value.commit_timestamp

        subscribed = ()
        if group.protocol_type is not None and group.is_(_EMPTY):
            def base(value):
                return group.state_timestamp if group.state_timestamp >= 0 else \
                    value.commit_timestamp
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE and group.is_(_STABLE):
            base, subscribed = commit_time, group.subscribed_topics()
        elif group.protocol_type is None:
            base = commit_time
        else:
            return []
        expired = []
        in_transactions = {tp for txn in group.pending_txn_offsets.values() for tp in txn}
        for tp, value in group.offsets.items():
            if tp[0] in subscribed or tp in group.pending_commits or tp in in_transactions:
                continue
            if value.expire_timestamp >= 0:  # a v1 value: its own expiry time
                gone = now_ms >= value.expire_timestamp
            else:
                gone = now_ms - base(value) >= self._retention_ms
            if gone:
                expired.append(tp)
        return expired

    # -- administration -----------------------------------------------------------------

    def describe_groups(self, group_ids, version=0):
        """DescribeGroups: [GroupSummary]; members' metadata and assignment only while
        Stable; an unknown group is Dead (and GROUP_ID_NOT_FOUND from ``version`` 6 on)."""
        answers = []
        for group_id in group_ids:
            error = self._group_error(group_id, empty_id_ok=True)
            group = self._groups.get(group_id)
            if error is not None:
                answers.append(GroupSummary(error, group_id, "", "", ""))
            elif group is None:
                answers.append(GroupSummary(GroupIdNotFoundError.errno if version >= 6 else NONE,
                                            group_id, _DEAD.value, "", ""))
            else:
                stable = group.is_(_STABLE)
                members = tuple(MemberSummary(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.metadata_for(group.protocol) if stable else b"",
                    m.assignment if stable else b"") for m in group.members.values())
                answers.append(GroupSummary(NONE, group_id, group.state.value,
                                            group.protocol_type or "",
                                            group.protocol if stable else "", members))
        return answers

    def list_groups(self, states_filter=()):
        """ListGroups: (error, [GroupOverview]) of every group here, or of those in one of
        ``states_filter`` (state names, any case). The error is COORDINATOR_LOAD_IN_PROGRESS
        while a partition loads (the groups loaded are listed all the same)."""
        wanted = {state.lower() for state in states_filter}
        error = CoordinatorLoadInProgressError.errno if self._loading else NONE
        return error, [GroupOverview(g.group_id, g.protocol_type or "", g.state.value)
                       for g in self._groups.values()
                       if not wanted or g.state.value.lower() in wanted]

    def delete_groups(self, group_ids, respond):
        """DeleteGroups: ``respond({group id: error})`` once the tombstones of the deleted
        groups (and of their offsets) are stored. Only Empty groups go (NON_EMPTY_GROUP
        otherwise); an unknown one is GROUP_ID_NOT_FOUND."""
        answers = {}
        waiting = set()
        eligible = []
        for group_id in group_ids:
            error = self._group_error(group_id, empty_id_ok=True)
            group = self._groups.get(group_id)
            if error is None and group is None:
                error = GroupIdNotFoundError.errno
            if error is None and not group.is_(_EMPTY):
                error = NonEmptyGroupError.errno
            if error is None:
                eligible.append(group)
            else:
                answers[group_id] = error

        def answer(group_id, error):
            answers[group_id] = _GROUP_WRITE_ERRORS.get(error, error)
            waiting.discard(group_id)
            if not waiting:
                respond(answers)

        waiting.update(g.group_id for g in eligible)
        for group in eligible:
            offsets = list(group.offsets)
            group.offsets.clear()
            group.offset_orders.clear()
            group.pending_commits.clear()
            group.pending_txn_offsets.clear()
            if not self._tombstone(group, offsets,
                                   lambda error, g=group.group_id: answer(g, error),
                                   lambda g=group.group_id: answer(g, NotCoordinatorError.errno)):
                answer(group.group_id, NONE)
        if not eligible:
            respond(answers)

    # -- helpers ------------------------------------------------------------------------

    def _group_error(self, group_id, empty_id_ok=False):
        """INVALID_GROUP_ID for a missing (or, where Kafka requires one, empty) group id,
        else ``error_for``."""
        if group_id is None or (not group_id and not empty_id_ok):
            return InvalidGroupIdError.errno
        return self.error_for(group_id)

    def _create_group(self, group_id):
        group = Group(group_id, self.partition_of(group_id))
        group.state_timestamp = self._clock_ms()
        self._groups[group_id] = group
        return group

    def _store_group(self, group, assignment, on_done):
        """Write ``group``'s GroupMetadata record with ``assignment`` ({member id: bytes})."""
        value = records.GroupMetadataValue(
            group.protocol_type or "", group.generation, group.protocol, group.leader,
            group.state_timestamp, tuple(records.MemberMetadata(
                m.member_id, m.client_id, m.client_host, m.session_timeout_ms,
                m.rebalance_timeout_ms, m.metadata_for(group.protocol),
                assignment.get(m.member_id, b""), m.group_instance_id)
                for m in group.members.values()))
        key = records.encode_key(records.GroupMetadataKey(group.group_id))
        self._write(group.partition, [(key, records.encode_value(value))], on_done,
                    lambda: None)

    def _write(self, partition, pairs, on_done, on_unload, producer=None):
        write = _Write(on_done, on_unload)
        pending = self._writes.setdefault(partition, set())
        pending.add(write)

        def callback(error):
            if write.done:
                return
            write.done = True
            pending.discard(write)
            write.on_done(error)

        if producer is None:
            self._store_records(partition, pairs, callback)
        else:
            self._store_records(partition, pairs, callback, producer=producer)


def _commit_txn_offsets(offsets, orders, transaction):
    """A committed ``transaction``'s offsets ({tp: PendingTxnOffset}) into ``offsets``
    ({tp: OffsetCommitValue}, their records' append orders in ``orders``), each unless
    the committed offset's record is the later one (Kafka's ``olderThan``)."""
    for tp, txn_offset in transaction.items():
        if tp not in offsets or orders.get(tp, -1) < txn_offset.order:
            offsets[tp] = txn_offset.value
            orders[tp] = txn_offset.order
