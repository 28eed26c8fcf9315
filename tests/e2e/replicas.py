"""What the replication end-to-end tests (tests/e2e/test_isr.py, test_divergence.py,
test_leader_moves.py) share: a topic placed on chosen brokers, the ISR of a partition as
the metadata page shows it, brokers paused with SIGSTOP for a ``with`` block (SIGCONT on
the way out, also on failure), and a replica's segment files read back as batches (base
offset, last offset, leader epoch, bytes) or as its checkpoint files.

The test process owns all of it; the brokers are the cluster's (TrackedCluster)."""
from __future__ import annotations

import contextlib
import os
import signal
import struct

from cluster import KafkaAdminClient, NewTopic
from segments.record import batch_descriptor as bd
from tests.support.bounds import BOUND


def create_placed_topic(cluster, topic, replicas, **configs):
    """Create ``topic`` with one partition on ``replicas`` (the first leads) and topic
    ``configs`` (Kafka's keys with ``_`` for ``.``); wait until it leads with every replica
    in its ISR; return its PartitionState."""
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(topic, replica_assignments={0: list(replicas)},
                                      topic_configs={k.replace("_", "."): str(v)
                                                     for k, v in configs.items()})])
    image = cluster.wait_for_metadata(
        lambda i: topic in i.topics
        and set(i.topics[topic].partitions[0].isr) == set(replicas), timeout=BOUND)
    return image.topics[topic].partitions[0]


def state_of(cluster, topic):
    return cluster.metadata().topics[topic].partitions[0]


def wait_for_isr(cluster, topic, isr):
    """Wait (within BOUND) until partition 0 of ``topic`` has the ISR ``isr`` (a set)."""
    return cluster.wait_for_metadata(
        lambda i: set(i.topics[topic].partitions[0].isr) == set(isr),
        timeout=BOUND).topics[topic].partitions[0]


def non_controllers(cluster):
    """The brokers that are not the controller (a SIGSTOPped controller does not fail
    over: tests stop only these)."""
    controller = cluster.metadata().controller_id
    return [b for b in cluster.broker_ids if b != controller]


@contextlib.contextmanager
def paused(cluster, *broker_ids):
    """SIGSTOP ``broker_ids`` for the block; SIGCONT them on the way out."""
    pids = [cluster.pids()[b] for b in broker_ids]
    stopped = []
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        yield pids
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)


def partition_dir(cluster, broker_id, topic, partition=0):
    return os.path.join(cluster.data_dir, f"broker-{broker_id}", f"{topic}-{partition}")


def log_bytes(cluster, broker_id, topic, partition=0):
    """The concatenated .log segment files of one replica (in offset order); b"" while its
    directory or a segment is not there."""
    path = partition_dir(cluster, broker_id, topic, partition)
    chunks = []
    try:
        for name in sorted(n for n in os.listdir(path) if n.endswith(".log")):
            with open(os.path.join(path, name), "rb") as file:
                chunks.append(file.read())
    except FileNotFoundError:
        return b""
    return b"".join(chunks)


def batches(data):
    """[(base offset, last offset, leader epoch, batch bytes)] of the whole RecordBatch v2
    batches in ``data`` (a torn tail is left out)."""
    found, position = [], 0
    while position + bd.LOG_OVERHEAD <= len(data):
        base, length = struct.unpack_from(">qi", data, position)
        end = position + bd.LOG_OVERHEAD + length
        if length <= 0 or end > len(data):
            break
        (epoch,) = struct.unpack_from(">i", data, position + bd.PARTITION_LEADER_EPOCH_OFFSET)
        (delta,) = struct.unpack_from(">i", data, position + bd.LAST_OFFSET_DELTA_OFFSET)
        found.append((base, base + delta, epoch, data[position:end]))
        position = end
    return found


def offsets_on_disk(cluster, broker_id, topic):
    """Every offset whose batch is in the replica's segment files."""
    return {o for base, last, _, _ in batches(log_bytes(cluster, broker_id, topic))
            for o in range(base, last + 1)}


def checkpoint_entries(path):
    """The entries of a Kafka checkpoint file (version line, count line, entries), each
    split on spaces; None if the file is not there."""
    try:
        with open(path) as file:
            lines = file.read().splitlines()
    except FileNotFoundError:
        return None
    return [tuple(line.split()) for line in lines[2:2 + int(lines[1])]]
