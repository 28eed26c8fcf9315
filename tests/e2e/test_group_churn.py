"""Group churn on real brokers (issue 13, KAFKA-BEHAVIOURS S6 in short): consumer
*processes* of one group share a 6-partition RF-3 topic of a 3-broker cluster while a
producer process trickles records in; a 4th member joins, then one member stops — by
SIGKILL, or cleanly. Each member writes to its own file, line by line (so a SIGKILL loses
nothing it wrote), the partitions it owns in each generation, every record it reads and
every commit it made (with the monotonic times around it). Then:

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

from cluster import (
    ConsumerRebalanceListener,
    KafkaAdminClient,
    KafkaConsumer,
    KafkaProducer,
    NewTopic,
    OffsetAndMetadata,
)
from cluster.errors import CommitFailedError
from tests.support.bounds import BOUND

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TOPIC = "churn"
PARTITIONS = 6
GROUP = "churners"
RECORDS = 360
SEND_EVERY = 0.03  # seconds between records: the producer outlasts the churn


def create_topic(data_dir):
    with KafkaAdminClient(bootstrap_servers=data_dir) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])


def trickle(data_dir):
    """Send RECORDS records round the partitions, one every SEND_EVERY seconds; return
    {partition: log end offset}."""
    with KafkaProducer(bootstrap_servers=data_dir, acks="all",
                       max_block_ms=BOUND * 1000) as producer:
        futures = []
        for n in range(RECORDS):
            futures.append(producer.send(TOPIC, b"r%d" % n, partition=n % PARTITIONS))
            time.sleep(SEND_EVERY)
        producer.flush(BOUND)
        ends = {}
        for future in futures:
            metadata = future.get(BOUND)
            ends[metadata.partition] = max(ends.get(metadata.partition, 0),
                                           metadata.offset + 1)
    return ends


def member(data_dir, name, log_path, stop_path):
    """A group member (public API only) reading until ``stop_path`` exists, then closing;
    writes ``owns G p...``, ``read G p offset``, ``commit t0 t1 p offset`` lines."""
    with open(log_path, "a", buffering=1) as log:
        def note(*fields):
            log.write(" ".join(map(str, fields)) + "\n")

        consumer = KafkaConsumer(bootstrap_servers=data_dir, group_id=GROUP, client_id=name,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 session_timeout_ms=6000, heartbeat_interval_ms=500,
                                 max_poll_interval_ms=BOUND * 1000, retry_backoff_ms=20)

        def commit(partitions):
            offsets = {tp: OffsetAndMetadata(consumer.position(tp), "", -1)
                       for tp in partitions}
            if not offsets:
                return
            before = time.monotonic()
            try:
                consumer.commit(offsets)
            except CommitFailedError:
                note("commit-failed")
                return
            after = time.monotonic()
            for tp, om in offsets.items():
                note("commit", before, after, tp.partition, om.offset)

        class Recorder(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                commit(revoked)

            def on_partitions_assigned(self, assigned):
                note("owns", consumer.group_metadata().generation_id,
                     *sorted(tp.partition for tp in consumer.assignment()))

        try:
            consumer.subscribe([TOPIC], listener=Recorder())
            while not os.path.exists(stop_path):
                polled = consumer.poll(timeout_ms=100, max_records=5)
                generation = consumer.group_metadata().generation_id
                for tp, records in polled.items():
                    for record in records:
                        note("read", generation, tp.partition, record.offset)
                commit(polled)
                time.sleep(0.02)
        finally:
            consumer.close()
    return name


def read_log(path):
    if not os.path.exists(path):
        return []
    with open(path) as file:
        return [line.split() for line in file.read().splitlines() if line]


class Group:
    """The test's side: member processes, their files, and what the files say."""

    def __init__(self, e2e, cluster):
        self.e2e = e2e
        self.cluster = cluster
        self.members = {}  # name -> (Child, log path, stop path)

    def start(self, name):
        base = self.e2e.tmp_path / name
        child = self.e2e.start(name, member, self.cluster.bootstrap_servers, name,
                               str(base) + ".log", str(base) + ".stop")
        self.members[name] = (child, str(base) + ".log", str(base) + ".stop")

    def logs(self):
        return {name: read_log(log) for name, (_, log, _) in self.members.items()}

    def owned(self):
        """{generation: {member: partitions}} from every ``owns`` line."""
        found = {}
        for name, lines in self.logs().items():
            for line in lines:
                if line[0] == "owns":
                    found.setdefault(int(line[1]), {})[name] = {int(p) for p in line[2:]}
        return found

    def settle(self, live, after=-1):
        """Wait until every member of ``live`` last joined one generation later than
        ``after`` in which they own every partition; that generation."""
        deadline = time.monotonic() + BOUND
        while True:
            latest = {}
            for generation, owners in sorted(self.owned().items()):
                for name in owners:
                    latest[name] = generation
            generations = {latest.get(name) for name in live}
            if len(generations) == 1 and None not in generations:
                generation = generations.pop()
                owners = self.owned()[generation]
                if generation > after and set(owners) == set(live) and \
                        set().union(*owners.values()) == set(range(PARTITIONS)):
                    return generation
            assert time.monotonic() < deadline, f"not settled: {self.owned()}"
            time.sleep(0.05)

    def committed(self):
        """{partition: highest offset committed} from the files."""
        found = {}
        for lines in self.logs().values():
            for line in lines:
                if line[0] == "commit":
                    partition, offset = int(line[3]), int(line[4])
                    found[partition] = max(found.get(partition, 0), offset)
        return found

    def stop(self, name):
        child, _, stop = self.members[name]
        open(stop, "w").close()
        assert child.result() == name


def churn(e2e, kill):
    cluster = e2e.cluster(brokers=3, offsets_topic_num_partitions=3,
                          group_initial_rebalance_delay_ms=0)
    e2e.start("create", create_topic, cluster.bootstrap_servers).result()
    producer = e2e.start("producer", trickle, cluster.bootstrap_servers)
    group = Group(e2e, cluster)
    for name in ("m0", "m1", "m2"):
        group.start(name)
    stable = [group.settle({"m0", "m1", "m2"})]
    group.start("m3")
    stable.append(group.settle({"m0", "m1", "m2", "m3"}, after=stable[-1]))
    if kill:
        os.kill(group.members["m1"][0].pid, signal.SIGKILL)
        group.members["m1"][0].process.join(BOUND)
    else:
        group.stop("m1")
    stable.append(group.settle({"m0", "m2", "m3"}, after=stable[-1]))
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

