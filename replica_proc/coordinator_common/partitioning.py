"""Which partition of a coordinator's topic holds a key: Kafka's rule, bit for bit.

A group lives in ``__consumer_offsets`` partition ``partition_for(group_id, n)`` and a
transactional id in ``__transaction_state`` partition ``partition_for(transactional_id,
n)`` (Kafka's ``GroupMetadataManager.partitionFor`` and
``TransactionStateManager.partitionFor``), both ``abs(hashCode(key)) % n`` with
Java's ``String.hashCode`` (31·h + each UTF-16 code unit, in 32-bit two's complement) and
Kafka's ``Utils.abs`` (``Integer.MIN_VALUE`` maps to 0, not to itself), so a group or a
transactional id lands on the partition, and so on the coordinator, that Kafka would
pick. Python's ``hash()`` differs from process to process and must never be used for this.

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


def partition_for(key, partitions):
    """The partition (of ``partitions``) of ``key``: a group id in ``__consumer_offsets``, a
    transactional id in ``__transaction_state``."""
    if partitions <= 0:
        raise ValueError(f"a coordinator topic's partition count must be positive, found "
                         f"{partitions}")
    return kafka_abs(java_string_hash(key)) % partitions
