"""Consumer group member processes for the end-to-end group tests, and the test's view of
them. A member (``member``: public API only, run in a forked process) writes to its own
file, one line at a time (a SIGKILL loses nothing it wrote):

- ``owns G p...``: after each assignment, its generation and the partitions it owns;
- ``read G p offset``: every record it reads, with the generation it read it in;
- ``commit t0 t1 p offset``: every commit that succeeded, with the monotonic times
  (system-wide on Linux) before and after it; ``commit-failed`` when one did not.

It commits what it read after each poll and, in ``on_partitions_revoked``, what it read of
the partitions it gives up. It stops and closes when its stop file exists; while its hold
file exists it stops polling (but keeps running). ``Members`` (the test's side) starts
them, reads their files, and waits for the group to settle."""
from __future__ import annotations

import os
import time

from cluster import (
    ConsumerRebalanceListener,
    KafkaAdminClient,
    KafkaConsumer,
    NewTopic,
    OffsetAndMetadata,
)
from cluster.errors import CommitFailedError
from tests.support.bounds import BOUND


def create_topic(data_dir, topic, partitions, replication_factor):
    with KafkaAdminClient(bootstrap_servers=data_dir) as admin:
        admin.create_topics([NewTopic(topic, partitions, replication_factor)])


def member(data_dir, topic, group, name, base, **config):
    """A member of ``group`` reading ``topic`` (module doc); its files are ``base`` +
    ``.log``, ``.stop``, ``.hold``; ``config`` adds to or overrides its consumer settings."""
    settings = dict(bootstrap_servers=data_dir, group_id=group, client_id=name,
                    auto_offset_reset="earliest", enable_auto_commit=False,
                    session_timeout_ms=6000, heartbeat_interval_ms=500,
                    max_poll_interval_ms=BOUND * 1000, retry_backoff_ms=20)
    settings.update(config)
    with open(base + ".log", "a", buffering=1) as log:
        def note(*fields):
            log.write(" ".join(map(str, fields)) + "\n")

        consumer = KafkaConsumer(**settings)

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
            consumer.subscribe([topic], listener=Recorder())
            while not os.path.exists(base + ".stop"):
                if os.path.exists(base + ".hold"):
                    time.sleep(0.02)
                    continue
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


class Members:
    """The test's side: member processes of one group, their files, and what the files
    say. Owned by the test's thread."""

    def __init__(self, e2e, cluster, topic, group, partitions):
        self.e2e = e2e
        self.cluster = cluster
        self.topic = topic
        self.group = group
        self.partitions = partitions
        self.children = {}  # name -> the Child last started under that name

    def base(self, name):
        return str(self.e2e.tmp_path / name)

    def start(self, name, **config):
        """Start member ``name`` (again, after it stopped: its file goes on)."""
        for suffix in (".stop", ".hold"):
            if os.path.exists(self.base(name) + suffix):
                os.unlink(self.base(name) + suffix)
        self.children[name] = self.e2e.start(name, member, self.cluster.bootstrap_servers,
                                             self.topic, self.group, name, self.base(name),
                                             **config)

    def stop(self, name):
        """Ask ``name`` to close and wait for it."""
        open(self.base(name) + ".stop", "w").close()
        assert self.children[name].result() == name

    def hold(self, name, held=True):
        """Make ``name`` stop polling (or poll again)."""
        if held:
            open(self.base(name) + ".hold", "w").close()
        else:
            os.unlink(self.base(name) + ".hold")

    def logs(self):
        return {name: read_log(self.base(name) + ".log") for name in self.children}

    def owned(self):
        """{generation: {member: partitions}} from every ``owns`` line."""
        found = {}
        for name, lines in self.logs().items():
            for line in lines:
                if line[0] == "owns":
                    found.setdefault(int(line[1]), {})[name] = {int(p) for p in line[2:]}
        return found

    def owns_lines(self, name):
        return [line for line in self.logs()[name] if line[0] == "owns"]

    def settle(self, live, after=-1):
        """Wait (within BOUND) until every member of ``live`` last joined one generation
        later than ``after``, in which they and no other member own every partition;
        return that generation."""
        deadline = time.monotonic() + BOUND
        while True:
            latest = {}
            owned = self.owned()
            for generation, owners in sorted(owned.items()):
                for name in owners:
                    latest[name] = generation
            generations = {latest.get(name) for name in live}
            if len(generations) == 1 and None not in generations:
                generation = generations.pop()
                owners = owned[generation]
                if generation > after and set(owners) == set(live) and \
                        set().union(*owners.values()) == set(range(self.partitions)):
                    return generation
            assert time.monotonic() < deadline, f"not settled on {sorted(live)}: {owned}"
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
