"""A consumer follows its partitions' leaders as they are killed and started again, in a
real 3-broker cluster (RF 3, min.insync.replicas 2), through the public API only.

Every record is acknowledged with acks=all first (so it is committed: on every replica of
the ISR, below the HW). A consumer then reads the four partitions a few records per fetch;
a quarter of the way the leader of partition 0 is SIGKILLed, and halfway it is started
again and the leader of partition 1 — maybe another broker — is SIGKILLed too. The
consumer finds each new leader (a Fetch refused or a dead connection makes it refresh its
metadata) and reads every committed record exactly once, in order, at the offset it was
acknowledged at (tests/e2e/helpers.py check_exactly_once_in_order).

The ``e2e`` fixture stops the cluster and fails the test if any process it started still
runs or any shared-memory object of its cluster is left."""
from __future__ import annotations

import time

import pytest

from cluster import KafkaAdminClient, KafkaConsumer, NewTopic, TopicPartition
from tests.e2e.helpers import (
    FAST,
    check_exactly_once_in_order,
    expected_layout,
    produce_keyed,
    stamp_of,
)
from tests.support.bounds import BOUND

pytestmark = pytest.mark.multiprocess

TOPIC = "moving"
PARTITIONS = 4
COUNT = 2000


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
