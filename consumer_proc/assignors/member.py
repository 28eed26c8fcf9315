"""What an assignor knows of one group member (from its JoinGroup subscription).

``member_id`` and ``group_instance_id`` (None for a dynamic member) come from the group
coordinator; ``topics``, ``owned`` (the ``(topic, partition)`` pairs the member held in
``generation``, KIP-429) and ``user_data`` (the assignor's own bytes, None when absent)
from the member's ConsumerProtocolSubscription.

Kafka's member order (``AbstractPartitionAssignor.MemberInfo``): static members first, by
instance id, then dynamic members by member id; ``sort_key`` gives it.

Pure data: any thread.
"""
from __future__ import annotations

import dataclasses

from cluster.protocol.consumer_protocol import NO_GENERATION


@dataclasses.dataclass(frozen=True)
class Member:
    member_id: str
    topics: tuple
    group_instance_id: str | None = None
    owned: tuple = ()
    generation: int = NO_GENERATION
    user_data: bytes | None = None

    def sort_key(self):
        if self.group_instance_id is not None:
            return (0, self.group_instance_id)
        return (1, self.member_id)


def ordered(members):
    """``members`` (a dict member id -> Member) in Kafka's member order."""
    return sorted(members.values(), key=Member.sort_key)


def empty_assignment(members):
    """``{member_id: {}}`` for every member: each assignor's starting point."""
    return {member_id: {} for member_id in members}


def add(assignment, member_id, topic, partition):
    assignment[member_id].setdefault(topic, []).append(partition)


def sorted_assignment(assignment):
    """The same assignment with each member's topics in name order and partitions
    ascending."""
    return {member_id: {topic: sorted(parts) for topic, parts in sorted(topics.items())}
            for member_id, topics in assignment.items()}
