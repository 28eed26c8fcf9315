"""One corrupt replica never loses acknowledged records, and heals (issue 20 item 1).

RF 3, min.insync.replicas 2, acks=all records; then one byte flipped in one replica's
``.log`` per partition (partition 0: its leader's, partition 1: a follower's) and

- a clean stop of every broker (the damage is below the recovery point: found by the
  first read or the scrub, the log goes offline), or
- a SIGKILL of every broker (the flip in the active segment, past the recovery point:
  recovery drops the bad batch and what follows it, the replica lost records),

then a start. Every acknowledged record is read back, and the damaged replicas heal:
reported, led by an intact replica, back in the ISR with nothing reported any more.
"""
from __future__ import annotations

import os
import random
import time

import pytest

from cluster import KafkaAdminClient, KafkaProducer, NewTopic
from tests.e2e.helpers import consume_partitions, record_key, record_value
from tests.e2e.replicas import batches, partition_dir
from tests.support.bounds import BOUND

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TOPIC = "heal"
PARTITIONS = 2
RECORDS = 600


def create_topic(cluster):
    """The RF 3 topic (min.insync.replicas 2), once every partition's ISR is full."""
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                                      topic_configs={"min.insync.replicas": "2"})])
    cluster.wait_for_metadata(lambda i: TOPIC in i.topics and all(
        len(s.isr) == 3 for s in i.topics[TOPIC].partitions), timeout=BOUND)


def produce(cluster):
    """Acknowledged (acks=all) records: {partition: {offset: seq}}."""
    acked = {p: {} for p in range(PARTITIONS)}
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=2,
                       batch_size=2048, max_block_ms=BOUND * 1000) as producer:
        futures = [(seq, producer.send(TOPIC, record_value(0, seq), key=record_key(0, seq)))
                   for seq in range(RECORDS)]
        producer.flush(BOUND)
        for seq, future in futures:
            metadata = future.get(BOUND)
            acked[metadata.partition][metadata.offset] = seq
    return acked


def flip_a_batch(directory, rng, last_segment):
    """Flip one byte inside the records of a batch of the first (or the last) segment of
    ``directory``; return the file's path."""
    names = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
    path = os.path.join(directory, names[-1 if last_segment else 0])
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        found = batches(bytes(data))
        assert len(found) > 2, f"{path} holds {len(found)} batches"
        start = sum(len(b[3]) for b in found[:len(found) // 2])
        middle = found[len(found) // 2][3]
        position = start + 61 + rng.randrange(len(middle) - 61)  # in the records: CRC fails
        data[position] ^= rng.randrange(1, 256)
        f.seek(0)
        f.write(data)
    return path


@pytest.mark.parametrize("stop", ["clean", "sigkill"])
def test_one_corrupt_replica_per_partition_loses_nothing_and_heals(e2e, stop):
    cluster = e2e.cluster(brokers=3, log_segment_bytes=16 * 1024,
                          replica_lag_time_max_ms=2000)
    create_topic(cluster)
    acked = produce(cluster)
    image = cluster.wait_for_metadata(lambda i: all(
        len(s.isr) == 3 for s in i.topics[TOPIC].partitions), timeout=BOUND)
    states = image.topics[TOPIC].partitions
    victims = {0: states[0].leader,
               1: next(b for b in states[1].replicas if b != states[1].leader)}
    if stop == "clean":
        cluster.stop()
    else:
        for broker in cluster.broker_ids:
            cluster.kill_broker(broker)
    rng = random.Random(f"heal-{stop}")
    flipped = {p: flip_a_batch(partition_dir(cluster, b, TOPIC, p), rng,
                               last_segment=stop == "sigkill")
               for p, b in victims.items()}
    if stop == "clean":
        cluster.start()
    else:
        for broker in cluster.broker_ids:  # one by one: the first may be a damaged one
            cluster.start_broker(broker)

    consumed = consume_partitions(cluster.bootstrap_servers, TOPIC,
                                  {p: len(rows) for p, rows in acked.items()})
    for partition, rows in acked.items():
        served = {offset: seq for offset, _, seq in consumed[partition]}
        lost = {o: s for o, s in rows.items() if served.get(o) != s}
        assert not lost, (f"partition {partition}: {len(lost)} of {len(rows)} acknowledged "
                          f"records lost or changed after the flip in {flipped[partition]}")

    if stop == "clean":  # found by a read or the scrub; the damaged segment kept aside
        deadline = time.monotonic() + BOUND
        while not all(any(n.endswith(".damaged") for n in os.listdir(
                partition_dir(cluster, b, TOPIC, p))) for p, b in victims.items()):
            assert time.monotonic() < deadline, "the damage was not found and set aside"
            time.sleep(0.05)
    healed = cluster.wait_for_metadata(lambda i: all(
        len(s.isr) == 3 and not s.damaged for s in i.topics[TOPIC].partitions),
        timeout=BOUND)
    assert all(s.leader >= 0 for s in healed.topics[TOPIC].partitions)
    for partition, broker in victims.items():
        directory = partition_dir(cluster, broker, TOPIC, partition)
        names = os.listdir(directory)
        # the healed replica holds every acknowledged record again
        offsets = {o for base, last, _, _ in batches(b"".join(
            open(os.path.join(directory, n), "rb").read()
            for n in sorted(names) if n.endswith(".log")))
            for o in range(base, last + 1)}
        assert set(acked[partition]) <= offsets


def test_a_broker_serves_only_once_its_replicas_are_opened(e2e):
    """Every broker of a cluster restarted at once (after SIGKILL) opens the replicas placed
    on it, which recovers their logs and reports a damaged one, before it counts as alive:
    otherwise the controller may make a replica whose recovery is about to drop a damaged
    segment the leader, and the intact followers truncate to it (seen at load: every
    acknowledged record of the partition gone)."""
    cluster = e2e.cluster(brokers=3, log_segment_bytes=16 * 1024)
    create_topic(cluster)
    acked = produce(cluster)
    cluster.wait_for_metadata(lambda i: all(
        len(s.isr) == 3 for s in i.topics[TOPIC].partitions), timeout=BOUND)
    for broker in cluster.broker_ids:
        cluster.kill_broker(broker)
    cluster.stop()
    rng = random.Random("serve-after-open")
    for partition in range(PARTITIONS):
        flip_a_batch(partition_dir(cluster, 1, TOPIC, partition), rng, last_segment=False)
    cluster.start()
    consumed = consume_partitions(cluster.bootstrap_servers, TOPIC,
                                  {p: len(rows) for p, rows in acked.items()})
    for partition, rows in acked.items():
        served = {offset: seq for offset, _, seq in consumed[partition]}
        assert all(served.get(o) == s for o, s in rows.items()), f"partition {partition}"
    for broker in cluster.broker_ids:
        with open(os.path.join(cluster.data_dir, f"broker-{broker}", "broker.log")) as log:
            serving = [line for line in log if f"broker {broker} serving:" in line]
        assert f"serving: {PARTITIONS} partition(s)" in serving[-1], serving[-1]
