"""Small value types of the public API, shaped as kafka-python's ``kafka.structs``.

User code that does ``from kafka.structs import TopicPartition`` ports by importing from
``cluster`` instead: the same names, fields, order and defaults. They are namedtuples, so
they hash, compare and unpack like tuples. Immutable: any thread may share them.
"""
from __future__ import annotations

from collections import namedtuple

TopicPartition = namedtuple("TopicPartition", ["topic", "partition"])
TopicPartition.__doc__ = """A topic name and a partition id: (topic: str, partition: int)."""

TopicPartitionReplica = namedtuple("TopicPartitionReplica", ["topic", "partition", "broker_id"])
TopicPartitionReplica.__doc__ = """One replica of a partition: topic, partition, broker_id."""

OffsetAndMetadata = namedtuple("OffsetAndMetadata", ["offset", "metadata", "leader_epoch"],
                               defaults=[None, "", -1])
OffsetAndMetadata.__doc__ = """An offset to commit for a group, with free-form metadata (a
str) and the leader epoch the consumer last saw (-1: unknown)."""

OffsetAndTimestamp = namedtuple("OffsetAndTimestamp", ["offset", "timestamp", "leader_epoch"])
OffsetAndTimestamp.__doc__ = """The answer of offsets_for_times: the first offset whose
timestamp is at or after the one asked for, that record's timestamp, and the leader epoch."""

MemberInformation = namedtuple(
    "MemberInformation",
    ["member_id", "client_id", "client_host", "member_metadata", "member_assignment",
     "group_instance_id"], defaults=[None])
MemberInformation.__doc__ = """One member of a group, as DescribeGroups reports it
(kafka-python's fields, then ``group_instance_id``: a static member's id, or None). For a
``consumer`` group ``member_metadata`` is a ConsumerSubscription and ``member_assignment`` a
ConsumerAssignment; for other protocol types the raw bytes."""

GroupInformation = namedtuple(
    "GroupInformation",
    ["error_code", "group", "state", "protocol_type", "protocol", "members",
     "authorized_operations"])
GroupInformation.__doc__ = """A group as DescribeGroups reports it (kafka-python's
``GroupInformation``): ``state`` is Kafka's name (``Stable``, ``Empty``, ``Dead``...),
``protocol`` the chosen assignor, ``members`` MemberInformation tuples,
``authorized_operations`` the bit field (-2147483648 when not asked for)."""

ConsumerSubscription = namedtuple("ConsumerSubscription",
                                  ["topics", "owned_partitions", "generation", "user_data"])
ConsumerSubscription.__doc__ = """A consumer's JoinGroup metadata: the topics it subscribes
to, the (topic, partition) pairs it owns, its generation (-1: none) and user data."""

ConsumerAssignment = namedtuple("ConsumerAssignment", ["assignment", "user_data"])
ConsumerAssignment.__doc__ = """A consumer's SyncGroup assignment: ``[(topic, [partitions])]``
sorted by topic (kafka-python's ``assignment`` field), and user data."""

ConsumerGroupMetadata = namedtuple("ConsumerGroupMetadata",
                                   ["group_id", "generation_id", "member_id",
                                    "group_instance_id"])
ConsumerGroupMetadata.__doc__ = """A group member's view of its group (Java's
``ConsumerGroupMetadata``): the group id, the generation it is in (-1: none), its member id
("" before the first JoinGroup) and its static instance id (or None)."""

TransactionListing = namedtuple("TransactionListing",
                                ["transactional_id", "producer_id", "state", "coordinator_id"])
TransactionListing.__doc__ = """One transactional id as ListTransactions reports it (Java's
``TransactionListing``): its producer id, its state by Kafka's name (``Ongoing``,
``CompleteCommit``...), and the broker that coordinates it (Java's ``allByBrokerId`` key)."""

TransactionDescription = namedtuple(
    "TransactionDescription",
    ["coordinator_id", "state", "producer_id", "producer_epoch", "transaction_timeout_ms",
     "transaction_start_time_ms", "topic_partitions"])
TransactionDescription.__doc__ = """A transactional id as DescribeTransactions reports it
(Java's ``TransactionDescription``): its coordinator, state (Kafka's name), producer id and
epoch, timeout, the wall-clock ms its transaction started (None: no transaction), and the
TopicPartitions of the transaction (a frozenset; while it ends, those without a marker)."""

ProducerState = namedtuple(
    "ProducerState",
    ["producer_id", "producer_epoch", "last_sequence", "last_timestamp", "coordinator_epoch",
     "current_transaction_start_offset"])
ProducerState.__doc__ = """An active producer of a partition as DescribeProducers reports
it (Java's ``ProducerState``): id, epoch, last sequence and last timestamp written, the epoch
of the last transaction coordinator that wrote it a marker (None: none) and the first
offset of its open transaction (None: none)."""
