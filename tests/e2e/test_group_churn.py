"""Group churn on real brokers (issue 13, Kafka's consumer_test in short): consumer
*processes* of one group share a 6-partition RF-3 topic of a 3-broker cluster while a
producer process trickles records in; a 4th member joins, then one member stops — by
SIGKILL, or cleanly. Each member (tests/e2e/group_members.py) writes to its own file what
it owns in each generation, every record it reads and every commit it made. Then:

- no partition is owned by two members in one generation;
- every partition is owned in the generation each phase settles in;
- every record is read at least once — exactly once when every stop is clean (a member
  commits what it read after each poll and in ``on_partitions_revoked``);
- no committed offset of a partition is ever below one committed before it;
- at the end the group's committed offsets are the log end offsets (LAG 0).

The ``e2e`` fixture stops the cluster and fails the test if any process it started still
runs or any shared-memory object of its cluster is left."""
from __future__ import annotations

import os
import signal
import time

import pytest

from cluster import KafkaAdminClient, KafkaProducer
from tests.e2e.group_members import Members, create_topic
from tests.support.bounds import BOUND
from tests.support.processes import CTX

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TOPIC = "churn"
PARTITIONS = 6
GROUP = "churners"
SEND_EVERY = 0.03  # seconds between records
RECORDS_AFTER = 2 * PARTITIONS  # sent once the churn is over: two more to every partition


def trickle(data_dir, churned):
    """Send records round the partitions, one every SEND_EVERY seconds, until ``churned``
    is set and RECORDS_AFTER more were sent: the producer outlasts the churn. Return
    {partition: log end offset}."""
    with KafkaProducer(bootstrap_servers=data_dir, acks="all",
                       max_block_ms=BOUND * 1000) as producer:
        futures = []
        last = None
        while last is None or len(futures) < last:
            n = len(futures)
            futures.append(producer.send(TOPIC, b"r%d" % n, partition=n % PARTITIONS))
            if last is None and churned.is_set():
                last = len(futures) + RECORDS_AFTER
            time.sleep(SEND_EVERY)
        producer.flush(BOUND)
        ends = {}
        for future in futures:
            metadata = future.get(BOUND)
            ends[metadata.partition] = max(ends.get(metadata.partition, 0),
                                           metadata.offset + 1)
    return ends


def churn(e2e, kill):
    cluster = e2e.cluster(brokers=3, offsets_topic_num_partitions=3,
                          group_initial_rebalance_delay_ms=0)
    e2e.start("create", create_topic, cluster.bootstrap_servers, TOPIC, PARTITIONS, 3).result()
    churned = CTX.Event()
    producer = e2e.start("producer", trickle, cluster.bootstrap_servers, churned)
    group = Members(e2e, cluster, TOPIC, GROUP, PARTITIONS)
    for name in ("m0", "m1", "m2"):
        group.start(name)
    stable = [group.settle({"m0", "m1", "m2"})]
    group.start("m3")
    stable.append(group.settle({"m0", "m1", "m2", "m3"}, after=stable[-1]))
    if kill:
        os.kill(group.children["m1"].pid, signal.SIGKILL)
        group.children["m1"].process.join(BOUND)
    else:
        group.stop("m1")
    stable.append(group.settle({"m0", "m2", "m3"}, after=stable[-1]))
    churned.set()
    ends = producer.result()
    deadline = time.monotonic() + BOUND
    while group.committed() != ends:
        assert time.monotonic() < deadline, f"committed {group.committed()}, ends {ends}"
        time.sleep(0.05)
    for name in ("m0", "m2", "m3"):
        group.stop(name)

    owned = group.owned()
    for generation, owners in owned.items():  # nobody shares a partition in a generation
        assert sum(map(len, owners.values())) == len(set().union(*owners.values())), \
            f"generation {generation}: {owners}"
    for generation in stable:
        assert set().union(*owned[generation].values()) == set(range(PARTITIONS))
    reads = {}
    commits = {}
    for lines in group.logs().values():
        for line in lines:
            if line[0] == "read":
                reads.setdefault(int(line[2]), []).append(int(line[3]))
            elif line[0] == "commit":
                commits.setdefault(int(line[3]), []).append(
                    (float(line[1]), float(line[2]), int(line[4])))
    assert sorted(reads) == list(range(PARTITIONS))
    for partition, offsets in reads.items():
        assert set(offsets) == set(range(ends[partition])), f"partition {partition}"
        if not kill:
            assert len(offsets) == ends[partition], f"partition {partition} read twice"
    for partition, made in commits.items():
        # a commit that returned before another was sent is never above it
        for _, after, offset in made:
            later = [o for b, _, o in made if b > after]
            assert all(o >= offset for o in later), f"partition {partition} went back"
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        final = admin.list_consumer_group_offsets(GROUP)
    assert {tp.partition: om.offset for tp, om in final.items()} == ends  # LAG 0
    assert all(tp.topic == TOPIC for tp in final)
    return stable


def test_members_join_and_one_is_killed_every_record_is_read_at_least_once(e2e):
    churn(e2e, kill=True)


def test_members_join_and_one_stops_cleanly_every_record_is_read_exactly_once(e2e):
    churn(e2e, kill=False)

