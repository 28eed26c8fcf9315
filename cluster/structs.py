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
