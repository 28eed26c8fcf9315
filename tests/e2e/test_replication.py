"""Followers replicate their leader's log, byte for byte, in a real 3-broker cluster.

Until the leader side tracks followers (ISR growth, a high watermark over the ISR) the ISR
of a new partition stays the leader alone, so these tests check the log bytes each replica
holds, not the ISR or the high watermark: once production stops, every replica's segment
files hold exactly the leader's batches (the leader's offsets and leader epochs kept) —
also after a follower was SIGKILLed, missed records, and was started again, and after a
leader was SIGKILLed and started again under a new leader epoch.

The ``e2e`` fixture stops the cluster and fails the test if any process it started still
runs or any shared-memory object of its cluster is left."""
from __future__ import annotations

import os
import struct
import time

import pytest

from cluster import KafkaAdminClient, KafkaProducer, NewTopic
from segments.record import batch_descriptor as bd
from tests.e2e.helpers import record_key, record_value
from tests.support.bounds import BOUND

pytestmark = pytest.mark.multiprocess

TOPIC = "replicated"
PARTITIONS = 2


def log_bytes(cluster, broker_id, partition):
    """The concatenated .log segment files of one replica (in offset order); None while
    its directory or a segment is not there (a broker starting, a follower truncating)."""
    path = os.path.join(cluster.data_dir, f"broker-{broker_id}", f"{TOPIC}-{partition}")
    chunks = []
    try:
        for name in sorted(n for n in os.listdir(path) if n.endswith(".log")):
            with open(os.path.join(path, name), "rb") as file:
                chunks.append(file.read())
    except FileNotFoundError:
        return None
    return b"".join(chunks)


def wait_until_replicas_match(cluster, image):
    """Wait (within BOUND) until every replica of every partition holds its leader's log
    bytes; return {partition: leader's bytes}."""
    deadline = time.monotonic() + BOUND
    while True:
        leaders, differ = {}, []
        for partition, state in enumerate(image.topics[TOPIC].partitions):
            leaders[partition] = log_bytes(cluster, state.leader, partition)
            differ += [(partition, r) for r in state.replicas if r != state.leader
                       and log_bytes(cluster, r, partition) != leaders[partition]]
        if not differ:
            return leaders
        assert time.monotonic() < deadline, f"replicas (partition, broker) {differ} do not " \
                                            f"hold their leader's bytes after {BOUND} s"
        time.sleep(0.05)


def produce(cluster, first, count):
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1, linger_ms=2,
                       max_block_ms=BOUND * 1000) as producer:
        futures = [producer.send(TOPIC, record_value(0, seq), key=record_key(0, seq))
                   for seq in range(first, first + count)]
        producer.flush(BOUND)
        return [f.get(BOUND).offset for f in futures]


def test_followers_hold_the_leaders_batches_and_a_restarted_one_catches_up(e2e):
    cluster = e2e.cluster(brokers=3)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
    image = cluster.wait_for_metadata(
        lambda i: TOPIC in i.topics
        and all(s.leader >= 0 for s in i.topics[TOPIC].partitions))
    produce(cluster, 0, 300)
    leaders = wait_until_replicas_match(cluster, image)
    assert all(leaders.values())  # both partitions got records

    # a broker that leads nothing (the ISR is the leader alone: killing a leader would
    # take its partition offline)
    [follower] = set(cluster.broker_ids) - {s.leader for s in image.topics[TOPIC].partitions}
    cluster.kill_broker(follower)
    produce(cluster, 300, 300)
    assert log_bytes(cluster, follower, 0) == leaders[0]  # it missed these
    cluster.start_broker(follower)
    after = cluster.wait_for_metadata(lambda i: i.brokers[follower].alive)
    assert [s.leader for s in after.topics[TOPIC].partitions] == \
        [s.leader for s in image.topics[TOPIC].partitions]
    caught_up = wait_until_replicas_match(cluster, after)
    assert len(caught_up[0]) > len(leaders[0])


def test_a_killed_leader_fails_over_and_rejoins_as_a_follower_of_the_new_epoch(e2e):
    """A leader SIGKILLed: a follower of its ISR leads under the next epoch; the killed
    broker, started again, follows it (truncating by epochs), and every replica ends with
    the new leader's bytes, including what it took after the failover, stamped with the
    new epoch."""
    cluster = e2e.cluster(brokers=3)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
    image = cluster.wait_for_metadata(
        lambda i: TOPIC in i.topics
        and all(s.leader >= 0 for s in i.topics[TOPIC].partitions))
    produce(cluster, 0, 200)
    before = wait_until_replicas_match(cluster, image)
    state = image.topics[TOPIC].partitions[0]
    cluster.kill_broker(state.leader)
    after = cluster.wait_for_metadata(
        lambda i: i.topics[TOPIC].partitions[0].leader not in (state.leader, -1))
    cluster.start_broker(state.leader)
    produce(cluster, 200, 200)
    after = cluster.wait_for_metadata(
        lambda i: len(i.topics[TOPIC].partitions[0].isr) == 3)
    caught_up = wait_until_replicas_match(cluster, after)
    assert caught_up[0].startswith(before[0]) and len(caught_up[0]) > len(before[0])
    new_epoch = after.topics[TOPIC].partitions[0].leader_epoch
    assert new_epoch > state.leader_epoch
    assert batch_epochs(caught_up[0])[-1] == new_epoch  # kept as the leader stamped it


def batch_epochs(data):
    """The partitionLeaderEpoch of each batch in ``data`` (whole RecordBatch v2 batches)."""
    epochs, position = [], 0
    while position < len(data):
        (length,) = struct.unpack_from(">i", data, position + bd.BATCH_LENGTH_OFFSET)
        (epoch,) = struct.unpack_from(">i", data, position + bd.PARTITION_LEADER_EPOCH_OFFSET)
        epochs.append(epoch)
        position += bd.LOG_OVERHEAD + length
    return epochs
