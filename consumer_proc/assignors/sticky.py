"""Kafka's StickyAssignor and CooperativeStickyAssignor (KIP-54, KIP-429).

Sticky: as balanced as round robin — with equal subscriptions the members' partition
counts differ by at most one — while keeping as many partitions as possible where they
were. What a member owned and in which generation: for the eager ``sticky``, from its
subscription's user data (``StickyAssignorUserData``, ``sticky_user_data_descriptor``),
because an eager member revokes everything before it rejoins; the consumer asks
``subscription_user_data(owned, generation)`` for those bytes with what it was given at
its last SyncGroup. For ``cooperative-sticky``, from the subscription's own
``owned_partitions`` and ``generation`` (``Member.owned``, ``Member.generation``). Either
way only the members of the highest generation reported count (a member of an older
generation lost its partitions when it fell out of the group, so a partition two members
claim goes to the one of the higher generation), and a partition two members of that
generation both claim belongs to neither (Kafka logs the conflict and reassigns it).

With equal subscriptions (the usual case) this is Kafka's constrained algorithm
(``AbstractStickyAssignor.ConstrainedAssignmentBuilder``): with P partitions and C
members, min quota = P // C and max quota = min + 1, held by P % C members. Each member
keeps its owned partitions up to its quota (max quota while members above the min are
still wanted, else min); the rest, and every unowned partition, are dealt in partition
order first to members below the min quota (round robin), then one each to members at the
min until P % C members hold the max. With different subscriptions: each member keeps its
owned partitions still in its subscription, up to the fair share of the partitions it can
take; the unowned go, most constrained partition first, to the eligible member holding the
fewest; then partitions move from a member to an eligible one holding at least two fewer
until no such move exists (balanced as far as the subscriptions allow; Kafka's general
builder reaches the same balance by a different search, so the exact owners can differ).

Cooperative sticky (KIP-429): the same assignment, except that a partition moving from one
live member to another is left out of this generation: its old owner revokes it on
learning the new assignment and rejoins, and the follow-up rebalance gives it to the new
owner. So no partition is ever owned by two members in one generation, and members keep
consuming what does not move.

Pure code: any thread.
"""
from __future__ import annotations

import dataclasses
import logging

from consumer_proc.assignors.member import (
    NO_GENERATION,
    add,
    empty_assignment,
    ordered,
    sorted_assignment,
)
from consumer_proc.assignors.sticky_user_data_descriptor import (
    decode_user_data,
    encode_user_data,
)

log = logging.getLogger(__name__)


def previous_owners(members, partitions):
    """``{(topic, partition): member_id}`` of the partitions owned in the highest
    generation reported, that still exist (``partitions``: the set of all of them)."""
    highest = max((m.generation for m in members.values()), default=NO_GENERATION)
    owners = {}
    conflicts = set()
    for member in ordered(members):
        if member.generation != highest:
            continue
        for tp in member.owned:
            if tp not in partitions:
                continue
            if tp in owners and owners[tp] != member.member_id:
                conflicts.add(tp)
            owners[tp] = member.member_id
    for tp in conflicts:
        log.error("partition %s-%d is claimed by several members of generation %d; it goes "
                  "to no previous owner", tp[0], tp[1], highest)
        del owners[tp]
    return owners


def _all_partitions(partitions_per_topic, members):
    topics = {t for m in members.values() for t in m.topics if t in partitions_per_topic}
    return sorted((t, p) for t in topics for p in range(partitions_per_topic[t]))


class StickyAssignor:
    name = "sticky"
    rebalance_protocol = "EAGER"

    @classmethod
    def subscription_user_data(cls, owned, generation):
        """The user data of a member's subscription: what it was assigned (``(topic,
        partition)`` pairs) at its last SyncGroup, of ``generation`` (NO_GENERATION and
        nothing before its first)."""
        return encode_user_data(owned, generation)

    @classmethod
    def claims(cls, members):
        """``members`` with ``owned`` and ``generation`` taken from their user data (an
        eager member reports them nowhere else); a member whose user data is absent or
        does not parse claims nothing."""
        out = {}
        for member_id, member in members.items():
            owned, generation = (), NO_GENERATION
            if member.user_data:
                try:
                    owned, generation = decode_user_data(member.user_data)
                except ValueError as exc:
                    log.warning("member %s's sticky user data ignored: %s", member_id, exc)
            out[member_id] = dataclasses.replace(member, owned=owned, generation=generation)
        return out

    @classmethod
    def assign(cls, partitions_per_topic, members):
        """``{member_id: {topic: [partitions]}}`` (see the module doc)."""
        assignment = empty_assignment(members)
        if not members:
            return assignment
        members = cls.claims(members)
        everything = _all_partitions(partitions_per_topic, members)
        owners = previous_owners(members, set(everything))
        subscriptions = {frozenset(m.topics).intersection(partitions_per_topic)
                         for m in members.values()}
        if len(subscriptions) == 1:
            owned = _constrained(everything, members, owners)
        else:
            owned = _general(everything, members, owners)
        for member_id, tps in owned.items():
            for topic, partition in tps:
                add(assignment, member_id, topic, partition)
        return sorted_assignment(assignment)


class CooperativeStickyAssignor(StickyAssignor):
    name = "cooperative-sticky"
    rebalance_protocol = "COOPERATIVE"

    @classmethod
    def subscription_user_data(cls, owned, generation):
        """None: a cooperative member reports what it owns in the subscription itself."""
        return None

    @classmethod
    def claims(cls, members):
        """``members`` as they are: ``owned`` and ``generation`` came with them."""
        return members

    @classmethod
    def assign(cls, partitions_per_topic, members):
        """The sticky assignment without the partitions that change owner (see the module
        doc)."""
        assignment = super().assign(partitions_per_topic, members)
        everything = set(_all_partitions(partitions_per_topic, members))
        owners = previous_owners(members, everything)
        for member_id, topics in assignment.items():
            for topic, parts in list(topics.items()):
                kept = [p for p in parts
                        if owners.get((topic, p), member_id) == member_id]
                if kept:
                    topics[topic] = kept
                else:
                    del topics[topic]
        return assignment


def _constrained(everything, members, owners):
    """Kafka's constrained assignment (equal subscriptions): ``{member_id: [tp]}``."""
    in_order = [m.member_id for m in ordered(members)]
    count = len(in_order)
    min_quota, over = divmod(len(everything), count)
    max_quota = min_quota + (1 if over else 0)
    owned = {member_id: [] for member_id in in_order}
    for tp in everything:
        if tp in owners:
            owned[owners[tp]].append(tp)
    result = {}
    under_min = []
    at_min = []
    members_over = 0
    for member_id in in_order:
        mine = owned[member_id]
        if len(mine) <= min_quota:
            result[member_id] = list(mine)
            if len(mine) < min_quota:
                under_min.append(member_id)
            elif members_over < over:
                at_min.append(member_id)
        elif members_over < over:
            result[member_id] = mine[:max_quota]
            members_over += 1
        else:
            result[member_id] = mine[:min_quota]
            at_min.append(member_id)
    if members_over >= over:
        at_min.clear()
    taken = {tp for tps in result.values() for tp in tps}
    unassigned = [tp for tp in everything if tp not in taken]
    turn = 0
    for tp in unassigned:
        if under_min:
            member_id = under_min[turn % len(under_min)]
            result[member_id].append(tp)
            if len(result[member_id]) == min_quota:
                under_min.remove(member_id)
                if members_over < over:
                    at_min.append(member_id)
            else:
                turn += 1
        elif at_min:
            member_id = at_min.pop(0)
            result[member_id].append(tp)
            members_over += 1
            if members_over >= over:
                at_min.clear()
        else:  # cannot happen: the quotas add up to the partition count
            raise AssertionError(f"no member can take {tp}: quotas {min_quota}/{max_quota}")
    return result


def _general(everything, members, owners):
    """Sticky assignment for different subscriptions: ``{member_id: [tp]}``."""
    eligible = {tp: [m.member_id for m in ordered(members) if tp[0] in m.topics]
                for tp in everything}
    result = {member_id: [] for member_id in members}
    # Each member keeps what it owned and still subscribes to, up to its fair share of
    # the partitions it could take.
    reachable = {member_id: sum(1 for tp in everything if member_id in eligible[tp])
                 for member_id in members}
    sharers = {member_id: 0 for member_id in members}
    for tp in everything:
        for member_id in eligible[tp]:
            sharers[member_id] += 1 / len(eligible[tp])
    for tp in everything:
        owner = owners.get(tp)
        if owner is not None and owner in eligible[tp] \
                and len(result[owner]) < max(1, round(sharers[owner])) \
                and reachable[owner]:
            result[owner].append(tp)
    taken = {tp for tps in result.values() for tp in tps}
    # The unowned, most constrained first, to the eligible member holding the fewest.
    for tp in sorted((tp for tp in everything if tp not in taken),
                     key=lambda tp: (len(eligible[tp]), tp)):
        if eligible[tp]:
            member_id = min(eligible[tp], key=lambda m: (len(result[m]), eligible[tp].index(m)))
            result[member_id].append(tp)
    # Balance: move a partition to an eligible member holding at least two fewer.
    moved = True
    while moved:
        moved = False
        for member_id in sorted(result, key=lambda m: -len(result[m])):
            for tp in list(result[member_id]):
                target = min(eligible[tp], key=lambda m: (len(result[m]), m))
                if len(result[target]) + 1 < len(result[member_id]):
                    result[member_id].remove(tp)
                    result[target].append(tp)
                    moved = True
                    break
            if moved:
                break
    return result
