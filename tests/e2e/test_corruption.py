"""Random single-byte flips in every kind of file a broker writes, then a restart.

The property (issue 10): for every kind of file, N seeded single-byte flips; after each,
the broker starts, every partition whose data files (``.log``) are intact serves all of its
acknowledged records, no record is ever served changed (nor a batch failing its CRC), and
each damaged partition is either repaired (truncated at the first bad batch, indexes
rebuilt: it serves a prefix of its records and the broker's log says what it dropped) or
offline with a message naming the file (KAFKA_STORAGE_ERROR for it in Fetch and Metadata,
the file's path in an ERROR line). A damaged meta.properties may instead stop the start,
with one ERROR line naming the file (``MAY_REFUSE``); a damaged metadata log, or copy of it,
is repaired from the other copy (``replica_proc.controller.metadata_copies``).

The files, from the code (``segments.log``, ``replica_proc.partition``,
``cluster.metadata.data_dir``, ``replica_proc.controller.metadata_log``):

- per partition (``D/broker-0/<topic>-<p>/``): ``.log``, ``.index``, ``.timeindex``,
  ``partition.metadata``, ``recovery-point-offset-checkpoint``,
  ``log-start-offset-checkpoint``, ``leader-epoch-checkpoint`` (``cleaner-offset-checkpoint``
  only for compacted topics; the ``.clean-shutdown`` marker is empty);
- per broker (``D/broker-0/``): ``meta.properties``, ``broker.json``,
  ``replication-offset-checkpoint`` (``broker.lock`` is empty; ``broker.log`` is output
  nobody reads);
- per data directory: ``D/meta.properties``, and the metadata log the controller writes,
  ``D/__cluster_metadata-0/`` (a partition log: ``.log`` and both checkpoints; its
  ``.index`` and ``.timeindex`` stay empty at this size), and its copy in the broker's
  directory, ``D/broker-0/__cluster_metadata-0.copy/`` (``.log`` files only).

One test per kind, each starting fresh copies of one stopped cluster (``template``).
Flips of one kind in different partitions share a broker start (one flip per partition,
so the other partitions also check that one partition's damage touches nobody else);
every other flip gets a start of its own. ``RINGLOG_FLIPS`` (default 1) sets N per kind,
``RINGLOG_FLIP_SEED`` the seed; the counts per kind are printed (``-s`` shows them), e.g.
``RINGLOG_FLIPS=1000 pytest -s -p no:xdist tests/e2e/test_corruption.py``.

At RF 3 (issue 20), the ``.log`` kind once more, on three brokers with min.insync.replicas
2: per round one flip in one random replica of every partition, after a clean stop or a
SIGKILL of every broker; the property is stronger there — every acknowledged record is
served (an intact replica leads) and every damaged replica heals (back in the ISR, no
longer reported damaged). ``perf.damaged_replica_flips`` runs the same rounds by hand at
larger counts.
"""
from __future__ import annotations

import collections
import os
import random
import shutil

import pytest

from cluster import Cluster, KafkaProducer
from cluster.errors import InconsistentClusterIdError, KafkaStorageError
from cluster.supervisor.supervisor import ClusterStartError
from perf import damaged_replica_flips as rf3
from segments.record.records import iter_records
from shm_ring.naming import list_objects
from tests.e2e.helpers import record_key, record_value
from tests.support.bounds import BOUND
from tests.support.broker import Client, fetch_request, metadata_request
from tests.support.topics import create_topic

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

FLIPS = int(os.environ.get("RINGLOG_FLIPS", "1"))
SEED = int(os.environ.get("RINGLOG_FLIP_SEED", "10"))
TOPIC = "flips"
PARTITIONS = 8
RECORDS = 1600
CONFIG = dict(log_segment_bytes=16 * 1024, log_index_interval_bytes=1024)
KAFKA_STORAGE_ERROR = 56

#: File kind -> (directory relative to D, or None for every partition's; name suffix).
PARTITION_KINDS = {
    ".log": ".log", ".index": ".index", ".timeindex": ".timeindex",
    "partition.metadata": "partition.metadata",
    "recovery-point-offset-checkpoint": "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint": "log-start-offset-checkpoint",
    "leader-epoch-checkpoint": "leader-epoch-checkpoint",
}
BROKER_KINDS = {
    "meta.properties (data dir)": ("", "meta.properties"),
    "meta.properties (broker)": ("broker-0", "meta.properties"),
    "broker.json": ("broker-0", "broker.json"),
    "replication-offset-checkpoint": ("broker-0", "replication-offset-checkpoint"),
    "metadata log .log": ("__cluster_metadata-0", ".log"),
    "metadata log copy .log": ("broker-0/__cluster_metadata-0.copy", ".log"),
    "metadata log recovery-point-offset-checkpoint":
        ("__cluster_metadata-0", "recovery-point-offset-checkpoint"),
    "metadata log log-start-offset-checkpoint":
        ("__cluster_metadata-0", "log-start-offset-checkpoint"),
}
#: Kinds whose damage may stop the start instead (one ERROR line naming the file): a
#: meta.properties (Kafka refuses such a start too).
MAY_REFUSE = ("meta.properties",)


def flip(rng, directory, suffix):
    """Flip one byte of a non-empty file in ``directory`` whose name ends in ``suffix``;
    return its path."""
    files = sorted(os.path.join(directory, n) for n in os.listdir(directory)
                   if n.endswith(suffix) and os.path.getsize(os.path.join(directory, n)))
    assert files, f"no non-empty file *{suffix} in {directory}: {os.listdir(directory)}"
    path = rng.choice(files)
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        position = rng.randrange(len(data))
        data[position] ^= rng.randrange(1, 256)
        f.seek(0)
        f.write(data)
    return path


def read_partition(client, partition, end):
    """``(error code, {offset: (key, value)}, problem)`` of everything the broker serves of
    ``partition`` up to ``end``; ``problem`` names a batch that failed its checks."""
    got, offset = {}, 0
    while offset < end:
        response = client.call(fetch_request([(TOPIC, partition, offset)]))
        data = response.responses[0].partitions[0]
        if data.error_code:
            return data.error_code, got, None
        try:
            records = [r for r in iter_records(data.records) if r.offset >= offset]
        except Exception as exc:  # a batch served with a bad CRC or framing
            return 0, got, f"served a damaged batch at offset {offset}: {exc}"
        if not records:
            break
        for record in records:
            got[record.offset] = (record.key, record.value)
        offset = records[-1].offset + 1
    return 0, got, None


class Outcomes:
    """Counts per file kind, and the property's violations."""

    def __init__(self):
        self.counts = collections.defaultdict(collections.Counter)
        self.violations = []

    def violate(self, kind, message):
        self.counts[kind]["VIOLATE THE PROPERTY"] += 1
        self.violations.append(message)

    def judge(self, kind, path, partition, expected, served, code, broker_log, context=""):
        """Classify a damaged partition (``path`` flipped) or check an intact one
        (``path`` None; ``context`` says what was flipped elsewhere)."""
        where = f"{kind} flip in {path}" if path else \
            f"intact partition {partition} {context}".rstrip()
        changed = {o: r for o, r in served.items() if expected.get(o) != r}
        if changed:
            self.violate(kind, f"{where}: records served changed at offsets "
                               f"{sorted(changed)[:5]}")
            return
        if code == KAFKA_STORAGE_ERROR and path and any(
                " ERROR " in line and path in line for line in broker_log):
            self.counts[kind]["offline with a message"] += 1
            return
        if code:
            self.violate(kind, f"{where}: error {code}, and no ERROR line names the file")
            return
        if len(served) == len(expected):
            if path:
                named = any(path in line or os.path.dirname(path) in line
                            for line in broker_log if " WARNING " in line or " ERROR " in line)
                self.counts[kind]["repaired" if named else "harmless"] += 1
            return
        prefix = sorted(served) == list(range(len(served)))
        dropped = any("dropped" in line and os.path.dirname(path or "?") in line
                      for line in broker_log)
        if path and path.endswith(".log") and prefix and dropped:
            self.counts[kind]["repaired"] += 1
            return
        missing = sorted(set(expected) - set(served))
        self.violate(kind, f"{where}: {len(missing)} acknowledged records not served "
                           f"(offsets {missing[:5]}...)")

    def report(self):
        return "; ".join(f"{kind}: " + ", ".join(f"{n} {what}" for what, n in sorted(c.items()))
                         for kind, c in sorted(self.counts.items())) or "no outcome"


def produce(cluster):
    """Acknowledged records (acks=all): {partition: {offset: (key, value)}}, in small
    batches (so that every segment has index entries)."""
    acked = {p: {} for p in range(PARTITIONS)}
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=5,
                       batch_size=2048, max_block_ms=BOUND * 1000) as producer:
        futures = [(record_key(0, seq), record_value(0, seq),
                    producer.send(TOPIC, record_value(0, seq), key=record_key(0, seq)))
                   for seq in range(RECORDS)]
        producer.flush(BOUND)
        for key, value, future in futures:
            metadata = future.get(BOUND)
            acked[metadata.partition][metadata.offset] = (key, value)
    return acked


class Rounds:
    """Broker starts on fresh copies of ``template``; each checks every partition."""

    def __init__(self, e2e, template, acked, outcomes):
        self.e2e = e2e
        self.template = template
        self.acked = acked
        self.outcomes = outcomes
        self.number = 0

    def run(self, damage):
        """Copy the template, ``damage(data_dir)`` -> {partition or None: (kind, path)},
        start, judge every partition, stop."""
        self.number += 1
        name = f"round-{self.number}"
        data_dir = os.path.join(self.e2e.tmp_path, name)
        shutil.copytree(self.template, data_dir)
        flipped = damage(data_dir)
        broker_log_path = os.path.join(data_dir, "broker-0", "broker.log")
        seen = os.path.getsize(broker_log_path)
        try:
            cluster = self.e2e.cluster(name=name, **CONFIG)
        except (ClusterStartError, KafkaStorageError, InconsistentClusterIdError) as exc:
            # the supervisor reads D/meta.properties itself; the broker's exit is reported
            self._refused(flipped, str(exc))
            return
        def broker_log():
            with open(broker_log_path, encoding="utf-8", errors="replace") as f:
                f.seek(seen)
                return f.read().splitlines()
        try:
            client = Client(cluster.namespace, 0)
            try:
                self._judge(client, flipped, broker_log)
            except ConnectionError as exc:  # the broker dropped the connection, or died
                kind, path = next(iter(flipped.values()))
                self.outcomes.violate(kind, f"{kind} flip in {path}: reading back failed: "
                                            f"{exc!r}")
            finally:
                client.close()
        finally:
            cluster.stop()
            shutil.rmtree(data_dir)

    def _refused(self, flipped, message):
        """The start failed: allowed for the files a broker cannot run without (a
        meta.properties, the metadata log), with a message naming the file."""
        [(kind, path)] = flipped.values()
        if kind.startswith(MAY_REFUSE) and path in message and "Traceback" not in message:
            self.outcomes.counts[kind]["start refused with a message"] += 1
        else:
            self.outcomes.violate(kind, f"{kind} flip in {path}: the cluster did not "
                                        f"start:\n{message[-2000:]}")

    def _judge(self, client, flipped, read_broker_log):
        """Read every partition, then ask Metadata (damage a first read finds takes the
        partition offline then) and the broker's log, and judge."""
        reads = [read_partition(client, partition, len(self.acked[partition]))
                 for partition in range(PARTITIONS)]
        metadata = client.call(metadata_request([TOPIC]))
        offline_in_metadata = {p.partition_index for t in metadata.topics
                               for p in t.partitions if 0 in p.offline_replicas}
        broker_log = read_broker_log()
        context = "({})".format("; ".join(f"{k} flip in {p}" for k, p in flipped.values()))
        violations = len(self.outcomes.violations)
        for partition, (code, served, problem) in enumerate(reads):
            expected = self.acked[partition]
            path = flipped[partition][1] if partition in flipped else None
            kind = next(iter(flipped.values()))[0]  # one kind per test
            if problem is not None:
                self.outcomes.violate(kind, f"partition {partition}: {problem} {context}")
                continue
            if (code == KAFKA_STORAGE_ERROR) != (partition in offline_in_metadata):
                self.outcomes.violate(
                    kind, f"partition {partition}: fetch error {code}, but Metadata's "
                          f"offline replicas say {partition in offline_in_metadata} {context}")
            self.outcomes.judge(kind, path, partition, expected, served, code, broker_log,
                                context)
        if None in flipped and len(self.outcomes.violations) == violations:
            kind, path = flipped[None]
            named = any(path in line for line in broker_log
                        if " WARNING " in line or " ERROR " in line)
            self.outcomes.counts[kind]["repaired" if named else "harmless"] += 1


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A stopped cluster's data directory (one broker, PARTITIONS partitions of RECORDS
    acknowledged records, several segments each) and its acknowledged records; every
    test starts copies of it."""
    data_dir = tmp_path_factory.mktemp("corruption") / "template"
    cluster = Cluster(data_dir, **CONFIG)
    try:
        cluster.start()
        create_topic(cluster, TOPIC, PARTITIONS)
        acked = produce(cluster)
    finally:
        cluster.stop()
    assert list_objects(cluster.cluster_id) == []
    return str(data_dir), acked


@pytest.mark.parametrize("kind", [*PARTITION_KINDS, *BROKER_KINDS])
def test_single_byte_flips(e2e, template, kind):
    outcomes = Outcomes()
    rounds = Rounds(e2e, *template, outcomes)
    rng = random.Random(f"{SEED}-{kind}")
    if kind in PARTITION_KINDS:
        for first in range(0, FLIPS, PARTITIONS):
            partitions = rng.sample(range(PARTITIONS), min(PARTITIONS, FLIPS - first))

            def damage(data_dir, partitions=partitions):
                flipped = {}
                for partition in partitions:
                    directory = os.path.join(data_dir, "broker-0", f"{TOPIC}-{partition}")
                    flipped[partition] = (kind, flip(rng, directory, PARTITION_KINDS[kind]))
                return flipped
            rounds.run(damage)
    else:
        where, suffix = BROKER_KINDS[kind]
        for _ in range(FLIPS):
            rounds.run(lambda data_dir: {None: (kind, flip(rng, os.path.join(data_dir, where),
                                                           suffix))})
    print(f"\n{kind}: {FLIPS} single-byte flip(s), seed {SEED}: {outcomes.report()}")
    assert not outcomes.violations, "\n".join(outcomes.violations)


@pytest.mark.parametrize("stop", ["clean", "sigkill"])
def test_single_byte_flips_in_one_replica_of_three(tmp_path, stop):
    rng = random.Random(f"{SEED}-rf3-{stop}")
    template = str(tmp_path / "template")
    acked = rf3.build_template(template, PARTITIONS, RECORDS, stop)
    lost, not_healed, flips = collections.Counter(), 0, 0
    while flips < FLIPS:
        round_lost, round_not_healed = rf3.run_round(
            template, str(tmp_path / f"round-{flips}"), acked, rng, BOUND, BOUND)
        lost.update(round_lost)
        not_healed += round_not_healed
        flips += PARTITIONS
    print(f"\n.log of one replica of three, {stop}: {flips} flips, seed {SEED}: "
          f"{sum(lost.values())} acknowledged records lost, {not_healed} not healed")
    assert not +lost, f"acknowledged records lost per partition: {dict(+lost)}"
    assert not_healed == 0
