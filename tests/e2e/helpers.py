"""What the end-to-end tests (tests/e2e) share besides the ``e2e`` fixture (tests/e2e/
conftest.py): the harness behind it (``E2E``: clusters and client processes, and the check,
after each test, that nothing it started is left); client process bodies written as a Kafka
user would write them (public API only); and the check that every record arrived exactly
once, in order per partition.

Records carry who wrote them: the value is ``(producer, seq)`` packed big-endian, padded
to the record size; the key spreads them over the partitions (Kafka's murmur2), so the
test knows ahead where each record must land. A producer process returns the
``(partition, offset)`` of each acknowledged record; a consumer process returns, per
partition, every ``(offset, producer, seq)`` it read.

Client processes are forked from the test process (the parent holds no client threads when
it forks: tests fork before they make clients of their own). Each writes its outcome (its
return value, or its traceback) to a file; the parent waits for it within BOUND seconds.
"""
from __future__ import annotations

import os
import pickle
import re
import signal
import struct
import time
import traceback

import psutil

from cluster import Cluster, KafkaConsumer, KafkaProducer, TopicPartition
from cluster.producer.partitioner import partition_for_key
from shm_ring.liveness import process_start_time
from shm_ring.naming import list_objects
from tests.support.bounds import BOUND
from tests.support.processes import CTX

FAST = dict(retry_backoff_ms=20, reconnect_backoff_ms=20, reconnect_backoff_max_ms=200)
"""Client settings that retry and reconnect quickly after a broker restart."""

KEYS_PER_PRODUCER = 64
"""Distinct keys each producer cycles through (enough to reach every partition)."""

_STAMP = struct.Struct(">II")


# -- records -------------------------------------------------------------------------------------

def record_key(producer, seq):
    return b"p%d-key%d" % (producer, seq % KEYS_PER_PRODUCER)


def record_value(producer, seq, size=100):
    """``size`` bytes (at least 8) starting with ``(producer, seq)``."""
    return _STAMP.pack(producer, seq).ljust(size, b".")


def stamp_of(value):
    """``(producer, seq)`` from a value made by record_value."""
    return _STAMP.unpack_from(value)


def expected_layout(producers, count, partitions):
    """{partition: [(producer, seq)]} in the order each producer sends: where Kafka's
    default partitioner puts every record of ``producers`` x ``count``."""
    layout = {p: [] for p in range(partitions)}
    for producer in producers:
        for seq in range(count):
            layout[partition_for_key(record_key(producer, seq), partitions)].append(
                (producer, seq))
    return layout


def check_exactly_once_in_order(consumed, layout, acknowledged=None):
    """Assert what consumers read (``consumed``: {partition: [(offset, producer, seq)]})
    against ``layout`` (expected_layout): in each partition, offsets 0..n-1 with no gap and
    no duplicate, exactly the records sent there, each producer's in the order it sent them.
    ``acknowledged`` ({producer: [(partition, offset)] by seq}): each acknowledged record is
    the one read at that partition and offset."""
    assert sorted(consumed) == sorted(layout)
    at = {}
    for partition, rows in consumed.items():
        offsets = [offset for offset, _, _ in rows]
        assert offsets == list(range(len(rows))), (
            f"partition {partition}: offsets are not 0..{len(rows) - 1} once each")
        stamps = [(producer, seq) for _, producer, seq in rows]
        assert sorted(stamps) == sorted(layout[partition]), (
            f"partition {partition}: {len(stamps)} records read, {len(layout[partition])} "
            f"sent; missing {sorted(set(layout[partition]) - set(stamps))[:5]}, unexpected "
            f"{sorted(set(stamps) - set(layout[partition]))[:5]}")
        last = {}
        for offset, producer, seq in rows:
            assert seq > last.get(producer, -1), (
                f"partition {partition} offset {offset}: producer {producer} seq {seq} after "
                f"seq {last[producer]}")
            last[producer] = seq
            at[partition, offset] = (producer, seq)
    for producer, placed in (acknowledged or {}).items():
        for seq, (partition, offset) in enumerate(placed):
            assert at.get((partition, offset)) == (producer, seq), (
                f"producer {producer} seq {seq} was acknowledged at partition {partition} "
                f"offset {offset}, which holds {at.get((partition, offset))}")


# -- client process bodies (public API only) ----------------------------------------------------

def produce_keyed(data_dir, topic, producer, count, barrier=None, value_size=100, **config):
    """Send ``count`` keyed records as producer number ``producer``; return the
    ``(partition, offset)`` of each, by seq. With ``barrier``, wait there after connecting."""
    with KafkaProducer(bootstrap_servers=data_dir, max_block_ms=BOUND * 1000, **config) as p:
        if barrier is not None:
            barrier.wait(BOUND)
        futures = [p.send(topic, record_value(producer, seq, value_size),
                          key=record_key(producer, seq)) for seq in range(count)]
        p.flush(BOUND)
        placed = []
        for future in futures:
            metadata = future.get(BOUND)
            placed.append((metadata.partition, metadata.offset))
    return placed


def consume_partitions(data_dir, topic, expected, barrier=None, **config):
    """Read partitions ``expected`` ({partition: record count}) of ``topic`` from the
    beginning until each has its count, then poll once more (nothing more may come);
    return {partition: [(offset, producer, seq)]}. With ``barrier``, wait there after
    connecting."""
    got = {partition: [] for partition in expected}
    with KafkaConsumer(bootstrap_servers=data_dir, auto_offset_reset="earliest",
                       **config) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in expected])
        if barrier is not None:
            barrier.wait(BOUND)
        deadline = time.monotonic() + BOUND
        while any(len(got[p]) < n for p, n in expected.items()):
            assert time.monotonic() < deadline, (
                f"within {BOUND} s read {[len(got[p]) for p in expected]} records of "
                f"partitions {list(expected)}, expected {list(expected.values())}")
            for tp, records in consumer.poll(timeout_ms=200).items():
                got[tp.partition].extend((r.offset, *stamp_of(r.value)) for r in records)
        for tp, records in consumer.poll(timeout_ms=200).items():  # extras, if any
            got[tp.partition].extend((r.offset, *stamp_of(r.value)) for r in records)
    return got


# -- processes and clusters -----------------------------------------------------------------------

def _child_main(path, target, args, kwargs):
    try:
        outcome = ("ok", target(*args, **kwargs))
    except BaseException:  # reported to the parent, which fails the test with it
        outcome = ("error", traceback.format_exc())
    with open(path + ".tmp", "wb") as file:
        pickle.dump(outcome, file)
    os.replace(path + ".tmp", path)


class Child:
    """One forked client process and the file its outcome goes to; owned by the test."""

    def __init__(self, name, process, path):
        self.name = name
        self.process = process
        self.path = path

    @property
    def pid(self):
        return self.process.pid

    def result(self, timeout=BOUND):
        """What the child's target returned; AssertionError with its traceback if it raised,
        or if it did not exit within ``timeout`` seconds."""
        self.process.join(timeout)
        assert not self.process.is_alive(), f"{self.name} (pid {self.pid}) still runs after " \
                                            f"{timeout} s"
        assert os.path.exists(self.path), (
            f"{self.name} (pid {self.pid}) exited with code {self.process.exitcode} and no "
            f"outcome")
        with open(self.path, "rb") as file:
            status, value = pickle.load(file)
        assert status == "ok", f"{self.name} (pid {self.pid}) failed:\n{value}"
        return value


class TrackedCluster(Cluster):
    """A Cluster that remembers every broker process it started (pid and start time)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.started = []  # psutil.Process of every broker started

    def _note(self):
        known = {p.pid for p in self.started}
        self.started += [psutil.Process(pid) for pid in self.pids().values() if pid not in known]

    def start(self):
        try:
            return super().start()
        finally:
            self._note()

    def start_broker(self, broker_id):
        try:
            super().start_broker(broker_id)
        finally:
            self._note()


_CONNECTION = re.compile(r"\.b([0-9]+)\.c([0-9]+)-")


def client_objects(cluster):
    """{pid: names} of the shared-memory objects of the running ``cluster`` that belong to
    client connections (a broker's own connections to other brokers excluded), and that a
    live process owns: the client, or the broker it connected to. A connection whose client
    and broker both died (a broker killed before it noticed its client's death) has no owner
    left; the broker id's next start unlinks it (shm_ring Listener.reap), else the cluster's
    stop, which finish() checks."""
    pids = cluster.pids()
    brokers = set(pids.values())
    found = {}
    for name in list_objects(cluster.cluster_id):
        match = _CONNECTION.search(name)
        if not match:
            continue
        broker_id, pid = int(match.group(1)), int(match.group(2))
        if pid not in brokers and (broker_id in pids or process_start_time(pid) is not None):
            found.setdefault(pid, []).append(name)
    return found


def running(process):
    """Whether ``process`` (psutil.Process) is still that process and not a zombie."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class E2E:
    """Clusters and client processes of one test (the ``e2e`` fixture)."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.clusters = []
        self.children = []
        self.cluster_ids = set()

    def cluster(self, brokers=1, name="data", **config):
        """Start a cluster of ``brokers`` in ``tmp_path/name`` (Kafka's broker keys as
        keyword arguments); it is stopped and checked at the end of the test."""
        cluster = TrackedCluster(self.tmp_path / name, brokers=brokers, **config)
        self.clusters.append(cluster)
        cluster.start()
        self.cluster_ids.add(cluster.cluster_id)
        return cluster

    def start(self, name, target, *args, **kwargs):
        """Run ``target(*args, **kwargs)`` in a forked process called ``name``."""
        path = str(self.tmp_path / f"outcome-{len(self.children)}.pickle")
        process = CTX.Process(target=_child_main, args=(path, target, args, kwargs),
                              name=name, daemon=True)
        process.start()
        child = Child(name, process, path)
        self.children.append(child)
        return child

    def finish(self):
        """Kill what is still running, check that every client connection is gone (closed,
        or dropped by the broker when its process died), stop every cluster, then check
        that no process the test started lives and no shared-memory object of its clusters
        is left."""
        problems = []
        for child in self.children:
            if child.process.is_alive():
                problems.append(f"{child.name} (pid {child.pid}) was still running")
                os.kill(child.pid, signal.SIGKILL)
            child.process.join(BOUND)
        for cluster in self.clusters:  # closed, or dead and dropped by the broker
            deadline = time.monotonic() + BOUND
            while (cluster.pids() and set(client_objects(cluster)) - {os.getpid()}
                   and time.monotonic() < deadline):
                time.sleep(0.02)  # the broker notices a dead client within a second
            if cluster.pids() and client_objects(cluster):
                problems.append(f"client connections still open: {client_objects(cluster)}")
        for cluster in self.clusters:
            cluster.stop()
        for cluster in self.clusters:
            alive = [p.pid for p in cluster.started if running(p)]
            if alive:
                problems.append(f"brokers {alive} of {cluster.data_dir} still run after stop")
        for cluster_id in self.cluster_ids:
            left = list_objects(cluster_id)
            if left:
                problems.append(f"cluster {cluster_id} left {left} in /dev/shm")
        alive = [c.name for c in self.children if c.process.is_alive()]
        if alive:
            problems.append(f"client processes {alive} survived SIGKILL")
        assert not problems, "; ".join(problems)
