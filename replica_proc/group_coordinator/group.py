"""One consumer group as its coordinator keeps it (Kafka's classic ``GroupMetadata``).

States (Kafka's GroupState): **Empty** (no members; offsets may still be committed with
generation -1) → **PreparingRebalance** (a join or a departure started a rebalance; members
must rejoin) → **CompletingRebalance** (the generation is formed, the leader computes the
assignment) → **Stable** (assignment stored and sent); **Dead** once deleted or unloaded.

A ``GroupMember`` holds what JoinGroup said (protocols with their metadata, timeouts, client
id and host, static ``group_instance_id``), its assignment, and the callbacks of a JoinGroup
or SyncGroup waiting for the rebalance (``awaiting_join`` / ``awaiting_sync``).

Besides its members a group tracks *pending members* (ids handed out with
MEMBER_ID_REQUIRED whose JoinGroup has not come back; a rebalance waits for them), the
*pending syncs* of the current generation (members that have not sent SyncGroup yet), its
committed offsets and the *pending commits* (written, not yet acknowledged by the store).
Each committed offset and each pending transactional one keeps the *append order* of its
record in the group's ``__consumer_offsets`` partition (a number that grows with the
record's offset), so a transaction's COMMIT keeps a later plain commit (Kafka's
``CommitRecordMetadataAndOffset.olderThan``).

The protocol of a generation is chosen by vote (Kafka's ``selectProtocol``): among the
protocols every member supports, each member votes for the first of its own list that is
a candidate, and the most voted wins (Kafka breaks ties by its map order; here the one
first in the longest-standing member's list wins, so the choice is deterministic).

Pure state: the coordinator (``coordinator``) changes it; one thread (the broker loop).
"""
from __future__ import annotations

import dataclasses
import enum

from cluster.protocol.consumer_protocol import decode_subscription

#: The protocol type of consumer groups (Kafka's ConsumerProtocol.PROTOCOL_TYPE).
CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclasses.dataclass(frozen=True)
class PendingTxnOffset:
    """A TxnOffsetCommit's offset waiting for its transaction's end: the value and the
    append order of its record."""

    value: object  # records.OffsetCommitValue
    order: int


@dataclasses.dataclass
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list  # [(name, metadata bytes)] in the member's preference order
    assignment: bytes = b""
    awaiting_join: object = None  # callback(JoinResult) of a parked JoinGroup
    awaiting_sync: object = None  # callback(SyncResult) of a parked SyncGroup
    is_new: bool = False  # joined during the current rebalance (Kafka's isNew)

    @property
    def is_static(self):
        return self.group_instance_id is not None

    def protocol_names(self):
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol):
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def same_protocols(self, protocols):
        return list(protocols) == list(self.protocols)

    def satisfied_without_heartbeat(self):
        """Whether a session that runs out now is excused (Kafka's ``hasSatisfiedHeartbeat``
        when no heartbeat came): a member parked in a JoinGroup or SyncGroup is, unless it is
        new in this rebalance (new members can expire while they wait to join)."""
        return not self.is_new and (self.awaiting_join is not None
                                    or self.awaiting_sync is not None)


class Group:
    """One group: id, state, generation, members (see the module doc)."""

    def __init__(self, group_id, partition):
        self.group_id = group_id
        #: The ``__consumer_offsets`` partition holding it.
        self.partition = partition
        self.state = GroupState.EMPTY
        self.generation = 0
        self.protocol_type = None
        self.protocol = None
        self.leader = None
        self.members = {}  # member id -> GroupMember, in join order
        self.static_members = {}  # group instance id -> member id
        self.pending_members = set()  # member ids given with MEMBER_ID_REQUIRED, not joined yet
        self.pending_sync = set()  # member ids of the generation that have not synced yet
        self.offsets = {}  # (topic, partition) -> records.OffsetCommitValue
        #: (topic, partition) -> the append order of the record behind ``offsets``' value
        #: (the coordinator's; an entry without an offset is never read).
        self.offset_orders = {}
        #: (topic, partition) -> the OffsetCommitValue of the latest commit being stored.
        self.pending_commits = {}
        #: producer id -> {(topic, partition): PendingTxnOffset}: TxnOffsetCommits stored
        #: in the producer's open transaction, committed offsets once its COMMIT lands.
        self.pending_txn_offsets = {}
        self.state_timestamp = -1  # wall-clock ms of the last state change (stored)
        #: The initial delay of an Empty group's first rebalance (Kafka's InitialDelayedJoin):
        #: the delay now running (ms) and what is left of the rebalance timeout after it,
        #: or None when the rebalance in progress (if any) is an ordinary one.
        self.initial_delay_ms = None
        self.initial_remaining_ms = 0
        #: A member joined during the initial delay (it is extended once more).
        self.new_member_added = False

    def __repr__(self):
        return (f"Group({self.group_id!r}, {self.state.value}, generation={self.generation}, "
                f"members={list(self.members)})")

    def is_(self, *states):
        return self.state in states

    def transition(self, state, now_ms):
        self.state = state
        self.state_timestamp = now_ms

    # -- members ----------------------------------------------------------------------------

    def add(self, member):
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.is_static:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id):
        """Forget ``member_id`` (a member or a pending one; absent ids are ignored, as in
        Kafka); the leadership passes to the longest-standing member left. Returns the
        member removed, or None."""
        member = self.members.pop(member_id, None)
        if member is not None and member.is_static and \
                self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync.discard(member_id)
        return member

    def replace_static(self, old_id, new_id):
        """Give static member ``old_id`` the id ``new_id`` (a restart with the same
        group.instance.id): the old id is fenced from now on. A JoinGroup or SyncGroup the
        old id still has parked is the caller's to answer (FENCED_INSTANCE_ID) before."""
        member = self.members[old_id]
        member.member_id = new_id
        # Same place in the join order, under the new id.
        self.members = {new_id if mid == old_id else mid: m for mid, m in self.members.items()}
        self.static_members[member.group_instance_id] = new_id
        if self.leader == old_id:
            self.leader = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def not_yet_rejoined(self):
        return [m for m in self.members.values() if m.awaiting_join is None]

    def all_rejoined(self):
        """Every member is parked in a JoinGroup and no pending member is still to come
        (Kafka's ``hasAllMembersJoined``)."""
        return not self.pending_members and all(
            m.awaiting_join is not None for m in self.members.values())

    def awaiting_join_count(self):
        """Members parked in a JoinGroup (Kafka's ``numAwaiting``)."""
        return sum(m.awaiting_join is not None for m in self.members.values())

    def rebalance_timeout_ms(self):
        """The longest rebalance timeout of the members (0 without members)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def member_metadata(self):
        """[(member id, group instance id, metadata for the generation's protocol)] of every
        member: what the leader's JoinGroup response carries."""
        return [(m.member_id, m.group_instance_id, m.metadata_for(self.protocol))
                for m in self.members.values()]

    # -- protocols ---------------------------------------------------------------------------

    def supports(self, protocol_type, protocols):
        """Whether a member with ``protocols`` could join: the group is empty, or the type
        matches and some protocol is supported by every member and this one."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidates() & {name for name, _ in protocols})

    def candidates(self):
        """Protocols every member supports."""
        members = list(self.members.values())
        common = set(members[0].protocol_names()) if members else set()
        for member in members[1:]:
            common &= set(member.protocol_names())
        return common

    def select_protocol(self):
        """The generation's protocol by vote (see the module doc)."""
        candidates = self.candidates()
        if not candidates:
            raise ValueError(f"group {self.group_id}: the members share no protocol")
        votes = {}
        for member in self.members.values():
            vote = next(name for name in member.protocol_names() if name in candidates)
            votes[vote] = votes.get(vote, 0) + 1
        order = next(iter(self.members.values())).protocol_names()
        return max(sorted(votes, key=order.index), key=lambda name: votes[name])

    def subscribed_topics(self):
        """Topics the members' consumer subscriptions name for the generation's protocol
        (OffsetDelete's GROUP_SUBSCRIBED_TO_TOPIC); empty for a group that is not a
        consumer group or has no protocol yet. A subscription that does not parse names
        no topic (logged by the caller's view: the group keeps working)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol is None:
            return set()
        topics = set()
        for member in self.members.values():
            try:
                subscribed, _, _, _ = decode_subscription(member.metadata_for(self.protocol))
            except (KeyError, ValueError):
                continue
            topics.update(subscribed)
        return topics
