"""What the group coordinator answers: the values its callbacks and methods return, with
Kafka's field names and Kafka's values for "none" (the broker's request handlers turn them
into JoinGroup, SyncGroup, DescribeGroups, ListGroups and OffsetFetch responses).

Error fields are Kafka error codes (``cluster.errors.X.errno``; 0 = none).

Plain values: any thread.
"""
from __future__ import annotations

import dataclasses

#: The member id of a member that has none yet, and the leader id of a failed JoinGroup
#: (Kafka's JoinGroupRequest.UNKNOWN_MEMBER_ID).
UNKNOWN_MEMBER_ID = ""
#: The generation of a failed JoinGroup (JoinGroupRequest.UNKNOWN_GENERATION_ID), and the
#: generation of an OffsetCommit from outside group management.
UNKNOWN_GENERATION = -1
#: The offset OffsetFetch returns for a partition without a committed offset.
INVALID_OFFSET = -1
#: The leader epoch of a commit that gave none.
NO_LEADER_EPOCH = -1


@dataclasses.dataclass(frozen=True)
class JoinMember:
    """One member as the leader's JoinGroup response lists it."""
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclasses.dataclass(frozen=True)
class JoinResult:
    """A JoinGroup answer. ``members`` is non-empty only for the generation's leader."""
    error: int
    member_id: str
    generation: int = UNKNOWN_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = UNKNOWN_MEMBER_ID
    members: tuple = ()

    @classmethod
    def failed(cls, member_id, error):
        return cls(error, member_id)


@dataclasses.dataclass(frozen=True)
class SyncResult:
    """A SyncGroup answer: the member's assignment (empty on error)."""
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclasses.dataclass(frozen=True)
class MemberSummary:
    """One member in DescribeGroups (metadata and assignment only while Stable)."""
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclasses.dataclass(frozen=True)
class GroupSummary:
    """One group in DescribeGroups; a group this coordinator does not know is ``Dead``
    with no members (Kafka's DeadGroup)."""
    error: int
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple = ()


@dataclasses.dataclass(frozen=True)
class GroupOverview:
    """One group in ListGroups."""
    group_id: str
    protocol_type: str
    state: str


@dataclasses.dataclass(frozen=True)
class CommittedOffset:
    """One partition in OffsetFetch: the committed offset, or INVALID_OFFSET."""
    offset: int = INVALID_OFFSET
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    error: int = 0
