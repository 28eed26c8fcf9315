"""Kafka's RoundRobinAssignor: every partition of every subscribed topic dealt in turn.

The partitions of all topics any member subscribes to, sorted by topic and partition, are
dealt one by one to the members in Kafka's member order, going round; a member not
subscribed to a partition's topic is skipped for it (Kafka's CircularIterator). With equal
subscriptions the counts differ by at most one.

Pure code: any thread.
"""
from __future__ import annotations

from consumer_proc.assignors.member import add, empty_assignment, ordered, sorted_assignment


class RoundRobinAssignor:
    name = "roundrobin"
    rebalance_protocol = "EAGER"

    @staticmethod
    def assign(partitions_per_topic, members):
        """``{member_id: {topic: [partitions]}}`` (see the module doc)."""
        assignment = empty_assignment(members)
        in_order = ordered(members)
        if not in_order:
            return assignment
        topics = sorted({t for m in in_order for t in m.topics if t in partitions_per_topic})
        turn = 0
        for topic in topics:
            for partition in range(partitions_per_topic[topic]):
                for step in range(len(in_order)):
                    member = in_order[(turn + step) % len(in_order)]
                    if topic in member.topics:
                        add(assignment, member.member_id, topic, partition)
                        turn = (turn + step + 1) % len(in_order)
                        break
        return sorted_assignment(assignment)
