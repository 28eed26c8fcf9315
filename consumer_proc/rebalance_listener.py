"""ConsumerRebalanceListener: what a group consumer's user hears when partitions move.

kafka-python's class (``on_partitions_revoked``, ``on_partitions_assigned``) with Java's
third callback, ``on_partitions_lost`` (by default it calls ``on_partitions_revoked``, as
Java's default method does). Pass an instance to ``KafkaConsumer.subscribe(...,
listener=...)``. When each is called (``consumer_proc.coordinator``):

- ``on_partitions_revoked(revoked)``: eager protocol, before every rejoin, with everything
  owned (offsets auto-committed just before); cooperative protocol (KIP-429), after a
  rebalance, with only the partitions that moved away, when there are any; and on close or
  unsubscribe with everything owned.
- ``on_partitions_assigned(assigned)``: after every rebalance: eager, the whole new
  assignment; cooperative, only the partitions added (possibly none).
- ``on_partitions_lost(lost)``: the member fell out of the group (session or poll timeout,
  UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION): the partitions may already belong to another
  member, so nothing is committed for them.

The callbacks run in the consumer's thread, inside ``poll`` (or ``close``/``unsubscribe``);
they may call the consumer (``commit``, ``seek``, ``position``). An exception from one is
logged and the rebalance goes on (kafka-python's handling).
"""
from __future__ import annotations


class ConsumerRebalanceListener:
    """Override the callbacks you need (module doc); each takes a set of TopicPartitions."""

    def on_partitions_revoked(self, revoked):
        """Partitions this consumer gives up (its last chance to commit them)."""

    def on_partitions_assigned(self, assigned):
        """Partitions this consumer now reads (positions: committed, else auto_offset_reset,
        unless the callback seeks)."""

    def on_partitions_lost(self, lost):
        """Partitions this consumer no longer owns without having revoked them; by default
        ``on_partitions_revoked(lost)``."""
        self.on_partitions_revoked(lost)
