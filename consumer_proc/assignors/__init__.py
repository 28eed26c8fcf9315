"""Partition assignors: how a consumer group's leader splits partitions among members.

The group leader (a consumer, as in Kafka's classic protocol) runs the assignor every
member voted for and sends the result in SyncGroup. Each assignor is a class with Kafka's
protocol ``name`` (``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``), its
``rebalance_protocol`` (EAGER: every member revokes everything before it rejoins;
COOPERATIVE: only what moves is revoked, KIP-429) and ``assign(partitions_per_topic,
members)`` (``assignor.Member`` in, ``{member_id: {topic: [partitions]}}`` out, every
member present, partitions ascending). The Subscription and Assignment bytes that travel
in JoinGroup and SyncGroup are ``cluster.protocol.consumer_protocol``'s (the broker reads
them too).

``resolve(strategies)`` turns a consumer's ``partition_assignment_strategy`` — names, the
Java class names Kafka users write, or the classes themselves — into assignor classes.

Pure code: any thread.
"""
from __future__ import annotations

from consumer_proc.assignors.range import RangeAssignor
from consumer_proc.assignors.round_robin import RoundRobinAssignor
from consumer_proc.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

ASSIGNORS = {cls.name: cls for cls in
             (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)}
#: The names Kafka's Java consumer takes for the same assignors.
JAVA_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": RangeAssignor,
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": RoundRobinAssignor,
    "org.apache.kafka.clients.consumer.StickyAssignor": StickyAssignor,
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": CooperativeStickyAssignor,
}
#: kafka-python's default ``partition_assignment_strategy``.
DEFAULT_STRATEGY = (RangeAssignor, RoundRobinAssignor)


def resolve(strategies):
    """Assignor classes for ``strategies`` (one or a sequence of names, Java class names or
    assignor classes), in preference order; ValueError naming an unknown one."""
    if isinstance(strategies, (str, type)):
        strategies = (strategies,)
    found = []
    for strategy in strategies:
        if isinstance(strategy, type) and callable(getattr(strategy, "assign", None)) \
                and isinstance(getattr(strategy, "name", None), str):
            found.append(strategy)
            continue
        cls = None
        if isinstance(strategy, str):
            cls = ASSIGNORS.get(strategy) or JAVA_NAMES.get(strategy)
        if cls is None:
            raise ValueError(
                f"partition_assignment_strategy {strategy!r} is not an assignor; expected "
                f"one of {', '.join(ASSIGNORS)} (or Kafka's class names, or a class with "
                f"`name` and `assign`)")
        found.append(cls)
    if not found:
        raise ValueError("partition_assignment_strategy is empty; name at least one assignor")
    names = [cls.name for cls in found]
    if len(set(names)) != len(names):
        raise ValueError(f"partition_assignment_strategy names an assignor twice: {names}")
    return tuple(found)
