"""Clients follow their partitions' leaders as they are killed and started again, in a
real 3-broker cluster (RF 3, min.insync.replicas 2), through the public API only.

Every record is acknowledged with acks=all first (so it is committed: on every replica of
the ISR, below the HW). A consumer then reads the four partitions a few records per fetch;
a quarter of the way the leader of partition 0 is SIGKILLed, and halfway it is started
again and the leader of partition 1 — maybe another broker — is SIGKILLed too. The
consumer finds each new leader (a Fetch refused or a dead connection makes it refresh its
metadata) and reads every committed record exactly once, in order, at the offset it was
acknowledged at (tests/e2e/helpers.py check_exactly_once_in_order). And records written
(acks=all) while a leader is SIGKILLed are kept at the offsets they were acknowledged at,
with every replica holding its leader's bytes once the ISR is full again.

The ``e2e`` fixture stops the cluster and fails the test if any process it started still
runs or any shared-memory object of its cluster is left."""
from __future__ import annotations

import time

import pytest

from cluster import KafkaAdminClient, KafkaConsumer, KafkaProducer, NewTopic, TopicPartition
from tests.e2e.helpers import (
    FAST,
    check_exactly_once_in_order,
    expected_layout,
    produce_keyed,
    record_key,
    record_value,
    stamp_of,
)
from tests.e2e.replicas import batches, log_bytes
from tests.support.bounds import BOUND

pytestmark = pytest.mark.multiprocess

TOPIC = "moving"
PARTITIONS = 4
COUNT = 2000


def end_on_disk(cluster, broker_id, topic, partition=0):
    """One past the last offset in the replica's segment files."""
    found = batches(log_bytes(cluster, broker_id, topic, partition))
    return found[-1][1] + 1 if found else 0


def produce_in_rounds(data_dir, topic, count, per_round=20, **config):
    """Child process body: send ``count`` keyed records as producer 0, flushing every
    ``per_round`` (a stream that lasts); the (partition, offset) of each, by seq."""
    with KafkaProducer(bootstrap_servers=data_dir, max_block_ms=BOUND * 1000, **config) as p:
        futures = []
        for first in range(0, count, per_round):
            futures += [p.send(topic, record_value(0, seq), key=record_key(0, seq))
                        for seq in range(first, min(count, first + per_round))]
            p.flush(BOUND)
        return [(f.get(BOUND).partition, f.get(BOUND).offset) for f in futures]


def partition_bytes(cluster, broker_id, partition):
    return log_bytes(cluster, broker_id, TOPIC, partition)


def test_a_consumer_reads_every_committed_record_once_while_leaders_are_killed(e2e):
    cluster = e2e.cluster(brokers=3, replica_lag_time_max_ms=1000)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3,
                                      topic_configs={"min.insync.replicas": "2"})])
    cluster.wait_for_metadata(lambda i: TOPIC in i.topics and all(
        len(s.isr) == 3 for s in i.topics[TOPIC].partitions), timeout=BOUND)
    placed = produce_keyed(cluster.bootstrap_servers, TOPIC, 0, COUNT, acks="all",
                           linger_ms=2, **FAST)
    layout = expected_layout([0], COUNT, PARTITIONS)

    got = {p: [] for p in range(PARTITIONS)}
    read = 0
    killed = []
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                       auto_offset_reset="earliest", max_partition_fetch_bytes=1024,
                       max_poll_records=20, request_timeout_ms=5000, **FAST) as consumer:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 3 * BOUND
        while read < COUNT:
            assert time.monotonic() < deadline, f"read {read} of {COUNT} records"
            for tp, records in consumer.poll(timeout_ms=200).items():
                got[tp.partition].extend((r.offset, *stamp_of(r.value)) for r in records)
                read += len(records)
            if read >= COUNT // 4 and not killed:
                killed.append(cluster.metadata().topics[TOPIC].partitions[0].leader)
                cluster.kill_broker(killed[0])
            elif read >= COUNT // 2 and len(killed) == 1:
                cluster.start_broker(killed[0])
                leader = cluster.metadata().topics[TOPIC].partitions[1].leader
                killed.append(leader)
                cluster.kill_broker(leader)
        for tp, records in consumer.poll(timeout_ms=500).items():  # nothing more may come
            got[tp.partition].extend((r.offset, *stamp_of(r.value)) for r in records)
    assert len(killed) == 2, f"the reads ended before both kills: {killed}"
    check_exactly_once_in_order(got, layout, {0: placed})
    # Brought back as an operator would: its listener unlinks what a client that died with
    # its previous incarnation left (the e2e fixture then finds no connection left).
    cluster.start_broker(killed[1])


def test_records_acknowledged_while_a_leader_is_killed_are_kept_at_their_offsets(e2e):
    """Kafka's replication_test, small: a producer (acks=all) writes while the leader of
    partition 0 is SIGKILLed and started again. Every acknowledged record is then read at
    the partition and offset it was acknowledged at (a retried batch may be there twice:
    the broker does not deduplicate), the offsets have no gap, and once the ISR is full
    again every replica holds its leader's bytes."""
    cluster = e2e.cluster(brokers=3, replica_lag_time_max_ms=1000)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(TOPIC, 2, 3, topic_configs={"min.insync.replicas": "2"})])
    image = cluster.wait_for_metadata(lambda i: TOPIC in i.topics and all(
        len(s.isr) == 3 for s in i.topics[TOPIC].partitions), timeout=BOUND)
    victim = image.topics[TOPIC].partitions[0].leader
    writer = e2e.start("producer", produce_in_rounds, cluster.bootstrap_servers, TOPIC, 3000,
                       acks="all", linger_ms=2, **FAST)
    deadline = time.monotonic() + BOUND
    while end_on_disk(cluster, victim, TOPIC) < 300:
        assert time.monotonic() < deadline, "partition 0 got no records"
        assert writer.process.is_alive(), writer.result()
        time.sleep(0.01)
    assert writer.process.is_alive()  # the kill comes mid-stream
    cluster.kill_broker(victim)
    cluster.wait_for_metadata(
        lambda i: i.topics[TOPIC].partitions[0].leader not in (victim, -1), timeout=BOUND)
    cluster.start_broker(victim)
    placed = writer.result()
    image = cluster.wait_for_metadata(lambda i: all(
        len(s.isr) == 3 for s in i.topics[TOPIC].partitions), timeout=BOUND)

    at = {}
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                       auto_offset_reset="earliest", **FAST) as consumer:
        tps = [TopicPartition(TOPIC, p) for p in range(2)]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps, timeout_ms=BOUND * 1000)
        deadline = time.monotonic() + BOUND
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"read {len(at)} of {ends} records"
            for tp, records in consumer.poll(timeout_ms=200).items():
                at.update({(tp.partition, r.offset): stamp_of(r.value) for r in records})
    assert sorted(at) == [(p, o) for p in range(2) for o in range(ends[TopicPartition(
        TOPIC, p)])]  # no gap
    lost = [(seq, where, at.get(where)) for seq, where in enumerate(placed)
            if at.get(where) != (0, seq)]
    assert lost == [], f"acknowledged records not at their offsets: {lost[:5]}"
    for p, state in enumerate(image.topics[TOPIC].partitions):
        leader_bytes = partition_bytes(cluster, state.leader, p)
        deadline = time.monotonic() + BOUND
        while any(partition_bytes(cluster, r, p) != leader_bytes for r in state.replicas):
            assert time.monotonic() < deadline, f"replicas of partition {p} differ"
            time.sleep(0.05)
