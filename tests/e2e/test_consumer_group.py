"""Consumer groups end to end on real brokers: KafkaConsumer(group_id=...) members of one
group share a topic's partitions (each partition to exactly one member, all of them
covered), commit what they read, and when a member closes the others take its partitions
over from its committed offsets: together they read every record once.

The ``e2e`` fixture stops the cluster and fails the test if any process it started still
runs or any shared-memory object of its cluster is left."""
from __future__ import annotations

import time

import pytest

from cluster import KafkaAdminClient, KafkaConsumer, KafkaProducer, NewTopic, TopicPartition
from tests.support.bounds import BOUND

pytestmark = pytest.mark.multiprocess

TOPIC = "events"
PARTITIONS = 6
GROUP = "readers"


def member(cluster, name):
    return KafkaConsumer(TOPIC, bootstrap_servers=cluster.bootstrap_servers, group_id=GROUP,
                         client_id=name, auto_offset_reset="earliest",
                         enable_auto_commit=False, session_timeout_ms=10_000,
                         heartbeat_interval_ms=500, max_poll_interval_ms=60_000)


def produce(cluster, values):
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
        for value in values:
            producer.send(TOPIC, value)
        producer.flush(BOUND)


def poll_until(consumers, predicate):
    """Poll every consumer in turn until ``predicate()`` (within BOUND); {name: values}."""
    read = {id(c): [] for c in consumers}
    deadline = time.monotonic() + BOUND
    while not predicate(read):
        assert time.monotonic() < deadline, f"read so far: {read}"
        for consumer in consumers:
            for records in consumer.poll(timeout_ms=50).values():
                read[id(consumer)] += [r.value for r in records]
    return read


def test_members_share_the_partitions_and_take_over_from_committed_offsets(e2e):
    cluster = e2e.cluster(brokers=3, offsets_topic_num_partitions=3,
                          group_initial_rebalance_delay_ms=0)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
    first = [f"a{n}".encode() for n in range(60)]
    produce(cluster, first)
    consumers = [member(cluster, f"m{n}") for n in range(3)]
    try:
        def settled(read):
            owned = [c.assignment() for c in consumers]
            return (all(owned) and sum(len(o) for o in owned) == PARTITIONS
                    and sum(len(v) for v in read.values()) == len(first))
        read = poll_until(consumers, settled)
        owned = [c.assignment() for c in consumers]
        assert set().union(*owned) == {TopicPartition(TOPIC, p) for p in range(PARTITIONS)}
        assert sum(len(o) for o in owned) == PARTITIONS  # disjoint
        assert sorted(v for values in read.values() for v in values) == sorted(first)
        for consumer in consumers:
            consumer.commit()
        leaving = consumers.pop()
        leaving.close()
        # the rebalance its LeaveGroup starts gives its partitions to the others
        during = poll_until(consumers, lambda read: sum(len(c.assignment()) for c in consumers)
                            == PARTITIONS and all(c.assignment() for c in consumers))
        assert not any(during.values())  # committed: nothing is read again
        second = [f"b{n}".encode() for n in range(60)]
        produce(cluster, second)
        read = poll_until(consumers, lambda read: sum(map(len, read.values())) >= len(second))
        # every partition resumed at its committed offset: nothing of ``first`` again
        assert sorted(v for values in read.values() for v in values) == sorted(second)
    finally:
        for consumer in consumers:
            consumer.close()
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        committed = admin.list_consumer_group_offsets(GROUP)
    assert sum(om.offset for om in committed.values()) >= len(first)


def test_sticky_members_keep_their_partitions_when_one_leaves(e2e):
    """Eager ``sticky``: each member's JoinGroup carries what it owned (StickyAssignorUserData),
    so after a member leaves the survivors keep theirs and only the leaver's move."""
    cluster = e2e.cluster(brokers=1, offsets_topic_num_partitions=1,
                          group_initial_rebalance_delay_ms=0)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    consumers = [KafkaConsumer(TOPIC, bootstrap_servers=cluster.bootstrap_servers,
                               group_id="sticky-readers", client_id=f"s{n}",
                               partition_assignment_strategy=["sticky"],
                               enable_auto_commit=False, session_timeout_ms=10_000,
                               heartbeat_interval_ms=500, max_poll_interval_ms=60_000)
                 for n in range(3)]
    try:
        def shared(members):
            owned = [c.assignment() for c in members]
            return all(len(o) == PARTITIONS // len(members) for o in owned) \
                and len(set().union(*owned)) == PARTITIONS
        poll_until(consumers, lambda read: shared(consumers))
        before = [set(c.assignment()) for c in consumers]
        leaving = consumers.pop()
        leaving.close()
        poll_until(consumers, lambda read: shared(consumers))
        for consumer, owned in zip(consumers, before):
            assert owned < consumer.assignment(), (owned, consumer.assignment())
        assert set().union(*(c.assignment() for c in consumers)) - set().union(*before[:2]) \
            == before[2]
    finally:
        for consumer in consumers:
            consumer.close()
