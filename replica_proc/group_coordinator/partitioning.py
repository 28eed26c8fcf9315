"""Which ``__consumer_offsets`` partition holds a group: Kafka's rule, bit for bit.

``partition_for(group_id, partitions)`` = ``abs(hashCode(group_id)) % partitions`` with
Java's ``String.hashCode`` (31·h + each UTF-16 code unit, in 32-bit two's complement) and
Kafka's ``Utils.abs`` (``Integer.MIN_VALUE`` maps to 0, not to itself), so a group lands on
the partition, and so on the coordinator, that Kafka would pick. Python's ``hash()`` differs
from process to process and must never be used for this.

Pure functions: any thread.
"""
from __future__ import annotations

_MASK = 0xFFFFFFFF


def java_string_hash(text):
    """Java's ``String.hashCode`` of ``text`` as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(value):
    """Kafka's ``Utils.abs``: the absolute value, except that -2**31 (whose absolute value
    an int cannot hold) gives 0."""
    return 0 if value == -(1 << 31) else abs(value)


def partition_for(group_id, partitions):
    """The ``__consumer_offsets`` partition (of ``partitions``) of group ``group_id``."""
    if partitions <= 0:
        raise ValueError(f"offsets.topic.num.partitions must be positive, found {partitions}")
    return kafka_abs(java_string_hash(group_id)) % partitions
