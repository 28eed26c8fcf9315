"""Which partitions a query reads: Spark's Kafka ``ConsumerStrategy`` for the three options
``subscribe`` (listed topics), ``subscribePattern`` (topics whose whole name matches a Java
style regex, as ``Pattern.matcher(topic).matches()``) and ``assign`` (listed partitions).

``partitions(consumer)`` asks the cluster now, so a topic created or a partition added since
the last call shows up (streaming picks them up this way). Strategies are small immutable
values, pickled with the readers to Spark's Python workers.
"""
from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Subscribe:
    """Every partition of ``topics`` (a tuple); topics that do not exist have none."""

    topics: tuple

    def partitions(self, consumer):
        from cluster.structs import TopicPartition

        return sorted(TopicPartition(topic, p) for topic in self.topics
                      for p in consumer.partitions_for_topic(topic))

    def reads_topic(self, topic):
        """Whether ``topic``'s partitions are read (before looking at the cluster)."""
        return topic in self.topics

    def __str__(self):
        return f"Subscribe[{','.join(self.topics)}]"


@dataclasses.dataclass(frozen=True)
class SubscribePattern:
    """Every partition of every topic whose name matches ``pattern`` as a whole (internal
    topics left out, as the consumer's exclude_internal_topics does)."""

    pattern: str

    def partitions(self, consumer):
        from cluster.structs import TopicPartition

        regex = re.compile(self.pattern)
        topics = sorted(t for t in consumer.topics() if regex.fullmatch(t))
        return sorted(TopicPartition(topic, p) for topic in topics
                      for p in consumer.partitions_for_topic(topic))

    def reads_topic(self, topic):
        """Whether ``topic``'s partitions are read (before looking at the cluster)."""
        return re.fullmatch(self.pattern, topic) is not None

    def __str__(self):
        return f"SubscribePattern[{self.pattern}]"


@dataclasses.dataclass(frozen=True)
class Assign:
    """Exactly ``partitions`` (a sorted tuple of TopicPartitions); those that do not exist
    (yet) are left out, as a topic that does not exist is under ``Subscribe``."""

    partitions_: tuple

    def partitions(self, consumer):
        existing = {}
        for tp in self.partitions_:
            if tp.topic not in existing:
                existing[tp.topic] = consumer.partitions_for_topic(tp.topic)
        return [tp for tp in self.partitions_ if tp.partition in existing[tp.topic]]

    def reads_topic(self, topic):
        """Whether ``topic``'s partitions are read (before looking at the cluster)."""
        return any(tp.topic == topic for tp in self.partitions_)

    def __str__(self):
        return "Assign[" + ", ".join(f"{tp.topic}-{tp.partition}" for tp in self.partitions_) + "]"
