"""Kafka's RangeAssignor: per topic, consecutive ranges of partitions to members in order.

For each topic, the members subscribed to it in Kafka's member order (static members by
instance id first, then dynamic ones by member id); with n partitions and m members, each
gets n // m consecutive partitions and the first n % m one more (Kafka's RangeAssignor).
Topics are split independently, so with several topics the first members get more.

Pure code: any thread.
"""
from __future__ import annotations

from consumer_proc.assignors.member import add, empty_assignment, ordered, sorted_assignment


class RangeAssignor:
    name = "range"
    rebalance_protocol = "EAGER"

    @staticmethod
    def assign(partitions_per_topic, members):
        """``{member_id: {topic: [partitions]}}`` (see the module doc)."""
        assignment = empty_assignment(members)
        in_order = ordered(members)
        for topic in sorted(partitions_per_topic):
            count = partitions_per_topic[topic]
            subscribed = [m.member_id for m in in_order if topic in m.topics]
            if not subscribed or count <= 0:
                continue
            share, extra = divmod(count, len(subscribed))
            start = 0
            for i, member_id in enumerate(subscribed):
                length = share + (1 if i < extra else 0)
                for partition in range(start, start + length):
                    add(assignment, member_id, topic, partition)
                start += length
        return sorted_assignment(assignment)
