"""``ringlog spark-bridge``: the bridge process against a real cluster.

Each bridge runs as its own process (``python -m cluster.tools.cli spark-bridge``), as a user
runs it; the test reads the parquet sink as Spark does, through the sink's metadata log
(``spark_bridge.sink_log``), so files of an interrupted attempt are not counted. Spark
starts in several seconds, so the file starts five bridges in all: one
``--available-now`` run; one bridge killed with SIGKILL while records are produced,
restarted at once, then stopped with Ctrl-C (SIGINT to its process group, as a terminal
sends it); and the same, stopped with SIGTERM, with ``--isolation-level read_committed``
while a transactional producer commits some transactions and aborts others (the sink ends
with exactly the committed records, each once). The bridge process and Spark's Python
workers that read publish stats pages as "bridge" and "spark-reader".

Every process a bridge starts (its JVM, Spark's Python workers) is recorded with psutil
while it runs; after a kill or a stop none may survive, and the shared-memory connections
its Python workers opened to the brokers must go (the brokers reap dead clients). Waits
are bounded; whatever still runs at the end is killed by pid.
"""
from __future__ import annotations

import io
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

import psutil
import pyarrow.parquet as pq
import pytest

from cluster import KafkaConsumer, KafkaProducer, TopicPartition
from cluster.stats.reader import read_all
from shm_ring.naming import list_objects
from spark_bridge import command as spark_bridge_cmd, jvm, sink_log
from spark_bridge.bridge import stop_line
from spark_bridge.checkpoint_log import read_progress
from spark_bridge.sinks import Sink, SinkSpecError, parse_sink
from spark_bridge.starting_offsets import PINNED_FILE, pin_starting_offsets, resumes
from spark_bridge.transform import TransformError, apply_transform, load_transform
from tests.support.bounds import SPARK_BRIDGE_BOUND
from tests.support.paths import ROOT
from tests.support.tools import run_tool, tool_cluster
from tests.support.topics import create_topic

#: One broker; the transaction state log fits on it (the transactional upstream's tests).
cluster = tool_cluster(1, transaction_state_log_replication_factor=1,
                       transaction_state_log_min_isr=1, transaction_state_log_num_partitions=1)


def add_value_length(df):
    """The transform the bridge applies in the tests (imported by the bridge process)."""
    from pyspark.sql import functions as F

    return df.withColumn("value_length", F.length("value"))


TRANSFORM = f"{__name__}:add_value_length"
"""``--transform`` naming add_value_length (this module, imported as a package module)."""


# -- the bridge process -------------------------------------------------------------------------

class BridgeProcess:
    """One ``ringlog spark-bridge`` process started by a test, its output files, and every
    process seen below it (recorded while it runs)."""

    def __init__(self, tmp_path, name, *argv):
        self.out_path = tmp_path / f"{name}.out"
        self.err_path = tmp_path / f"{name}.err"
        env = dict(os.environ, PYTHONPATH=ROOT)
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "cluster.tools.cli", "spark-bridge", *map(str, argv)],
                cwd=ROOT, env=env, stdout=out, stderr=err, start_new_session=True)
        self.process = psutil.Process(self.popen.pid)
        self.seen = {}  # pid -> psutil.Process

    def interrupt(self):
        """Ctrl-C as a terminal sends it: SIGINT to the bridge's whole process group (its
        own session: the JVM and Spark's Python workers in it get the signal too)."""
        os.killpg(self.popen.pid, signal.SIGINT)

    def note_children(self):
        try:
            for child in self.process.children(recursive=True):
                self.seen.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass

    @property
    def out(self):
        return self.out_path.read_text()

    def batches(self):
        """(batch id, rows, end offsets) of each progress line printed so far."""
        found = []
        for line in self.out.splitlines():
            if line.startswith("batch "):
                head, _, offsets = line.partition(", end offsets ")
                batch_id, _, rest = head[len("batch "):].partition(": ")
                found.append((int(batch_id), int(rest.split()[0]), json.loads(offsets)))
        return found

    def wait_until(self, predicate, what):
        deadline = time.monotonic() + SPARK_BRIDGE_BOUND
        while not predicate():
            self.note_children()
            assert self.popen.poll() is None, (
                f"bridge exited with {self.popen.returncode} while waiting for {what}:\n"
                f"{self.out}\n{self.err_path.read_text()[-3000:]}")
            assert time.monotonic() < deadline, (
                f"no {what} within {SPARK_BRIDGE_BOUND} s:\n{self.out}\n"
                f"{self.err_path.read_text()[-3000:]}")
            time.sleep(0.2)
        self.note_children()

    def wait_exit(self):
        """The bridge's exit code, once it exits (within SPARK_BRIDGE_BOUND seconds)."""
        deadline = time.monotonic() + SPARK_BRIDGE_BOUND
        while self.popen.poll() is None:
            self.note_children()
            assert time.monotonic() < deadline, (
                f"bridge still runs after {SPARK_BRIDGE_BOUND} s:\n{self.out}\n"
                f"{self.err_path.read_text()[-3000:]}")
            time.sleep(0.2)
        return self.popen.returncode

    def assert_nothing_left(self, cluster_id):
        """Every process the bridge started exits, and the brokers drop the shared-memory
        connections of its clients."""
        started = list(self.seen.values())
        assert started, "no process recorded below the bridge"
        _, alive = psutil.wait_procs(started + [self.process], timeout=60)
        assert not alive, f"still running after the bridge ended: " \
                          f"{[(p.pid, p.name()) for p in alive]}"
        pids = {self.process.pid, *self.seen}
        deadline = time.monotonic() + 30
        while True:
            left = [name for name in list_objects(cluster_id)
                    if any(f".c{pid}-" in name for pid in pids)]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert left == [], f"shared memory of the bridge's processes left: {left}"

    def kill_everything(self):
        for process in [self.process, *self.seen.values()]:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        self.popen.wait(30)


@pytest.fixture
def bridges(tmp_path):
    started = []

    def start(name, *argv):
        bridge = BridgeProcess(tmp_path, name, *argv)
        started.append(bridge)
        return bridge
    yield start
    for bridge in started:
        bridge.kill_everything()


def read_sink(path):
    """(partition, offset) -> row dict of every committed row of the parquet sink, and how
    many rows there were (duplicates included)."""
    files = sink_log.committed_files(str(path))
    rows = pq.read_table(files).to_pylist() if files else []
    return {(row["partition"], row["offset"]): row for row in rows}, len(rows)


def produce(cluster, topic, values):
    """Send ``values`` (keyed) to ``topic``; {(partition, offset): (key, value)}."""
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        futures = [(producer.send(topic, value, key=b"k%d" % (n % 7)), value, b"k%d" % (n % 7))
                   for n, value in enumerate(values)]
        producer.flush(30)
        return {(m.partition, m.offset): (key, value)
                for m, value, key in ((f.get(30), v, k) for f, v, k in futures)}


class BackgroundProducer(threading.Thread):
    """A producer thread for a test: ``run`` sends until ``stopping`` is set and keeps
    its error in ``error``; ``finish`` stops it and raises that error."""

    def __init__(self, cluster, topic):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.topic = topic
        self.stopping = threading.Event()
        self.error = None

    def finish(self):
        self.stopping.set()
        self.join(60)
        assert self.error is None, f"{type(self).__name__} failed: {self.error!r}"


class PacedProducer(BackgroundProducer):
    """Sends 100 records every 100 ms until stopped; remembers what was acknowledged."""

    def __init__(self, cluster, topic):
        super().__init__(cluster, topic)
        self.acknowledged = {}

    def run(self):
        try:
            with KafkaProducer(bootstrap_servers=self.cluster.bootstrap_servers,
                               linger_ms=5) as producer:
                n = 0
                while not self.stopping.wait(0.1):
                    batch = [(b"v%08d" % (n + i), producer.send(self.topic, b"v%08d" % (n + i)))
                             for i in range(100)]
                    n += 100
                    producer.flush(30)
                    for value, future in batch:
                        metadata = future.get(30)
                        self.acknowledged[metadata.partition, metadata.offset] = value
        except BaseException as exc:  # reported by the test
            self.error = exc

    def finish(self):
        super().finish()
        return self.acknowledged


# -- tests --------------------------------------------------------------------------------------

@pytest.mark.multiprocess
@pytest.mark.spark
@pytest.mark.slow
def test_available_now_writes_every_committed_record_through_the_transform(
        cluster, bridges, tmp_path):
    create_topic(cluster, "bridge-all", 3)
    produced = produce(cluster, "bridge-all", [b"value-%d" % n + b"x" * (n % 50)
                                               for n in range(3000)])
    bridge = bridges("all", "--bootstrap-server", cluster.bootstrap_servers,
                     "--topic", "bridge-all", "--sink", f"parquet:{tmp_path / 'sink'}",
                     "--checkpoint", tmp_path / "checkpoint", "--available-now",
                     "--starting-offsets", "earliest", "--max-offsets-per-trigger", 1000,
                     "--transform", TRANSFORM)
    assert bridge.wait_exit() == 0, bridge.err_path.read_text()[-3000:]
    bridge.assert_nothing_left(cluster.cluster_id)

    rows, count = read_sink(tmp_path / "sink")
    assert count == len(produced) == len(rows)
    assert set(rows) == set(produced)
    for at, (key, value) in produced.items():
        row = rows[at]
        assert (row["key"], row["value"], row["topic"]) == (key, value, "bridge-all")
        assert row["value_length"] == len(value)
    batches = bridge.batches()
    assert len(batches) >= 3  # maxOffsetsPerTrigger=1000 over 3000 records
    assert sum(rows for _, rows, _ in batches) == 3000
    assert batches[-1][2] == {"bridge-all": {
        str(p): max(o for q, o in produced if q == p) + 1 for p in range(3)}}
    assert f"Processed a total of 3000 rows in {len(batches)} batches" in bridge.out
    assert jvm.INCUBATOR_NOTICE.decode() not in bridge.err_path.read_text()


@pytest.mark.multiprocess
@pytest.mark.spark
@pytest.mark.slow
def test_sigkill_mid_stream_then_restart_leaves_every_record_once_and_ctrl_c_stops(
        cluster, bridges, tmp_path):
    create_topic(cluster, "bridge-kill", 3)
    # No --starting-offsets: the bridge starts at the latest offsets (Spark's default),
    # pinned when the first bridge starts, while records are being produced.
    argv = ["--bootstrap-server", cluster.bootstrap_servers, "--topic", "bridge-kill",
            "--sink", f"parquet:{tmp_path / 'sink'}", "--checkpoint", tmp_path / "checkpoint",
            "--trigger", "500ms"]
    producer = PacedProducer(cluster, "bridge-kill")
    producer.start()
    try:
        deadline = time.monotonic() + 30
        while len(producer.acknowledged) < 500:
            assert producer.error is None and time.monotonic() < deadline, (
                f"the producer got {len(producer.acknowledged)} acknowledgements in 30 s: "
                f"{producer.error!r}")
            time.sleep(0.05)
        first = bridges("first", *argv)
        first.wait_until(lambda: sum(1 for _, rows, _ in first.batches() if rows) >= 2,
                         "two batches with rows")
        # Its stats pages (cluster.stats): the bridge process itself, and Spark's Python
        # workers while they read.
        roles = {}
        first.wait_until(lambda: roles.update(
            (s.role, s.pid) for s in read_all(cluster.cluster_id)) or
            {"bridge", "spark-reader"} <= set(roles), "the bridge's and readers' stats pages")
        assert roles["bridge"] == first.process.pid
        first.process.kill()  # SIGKILL: no shutdown at all
        assert first.wait_exit() == -signal.SIGKILL
        killed_at = len(first.err_path.read_text())
        # Started again at once: it waits for the killed bridge's JVM, which is still
        # stopping, before it touches the checkpoint.
        second = bridges("second", *argv)
        first.assert_nothing_left(cluster.cluster_id)
        # What the JVM wrote once its driver was gone (Java errors about the lost driver)
        # does not reach the killed bridge's log.
        assert first.err_path.read_text()[killed_at:] == ""
        second.wait_until(lambda: any(rows for _, rows, _ in second.batches()),
                          "a batch with rows after the restart")
    finally:
        acknowledged = producer.finish()
    ends = {str(p): max(o for q, o in acknowledged if q == p) + 1 for p in range(3)}
    second.wait_until(lambda: second.batches()[-1][2] == {"bridge-kill": ends},
                      f"the end offsets {ends}")
    second.interrupt()  # Ctrl-C: stops as SIGTERM does (the read_committed test sends that)
    assert second.wait_exit() == 0, second.err_path.read_text()[-3000:]
    assert "Exception" not in second.err_path.read_text()  # no Java trace either
    lines = second.out.splitlines()
    assert "Processed a total of" in lines[-2]
    # The last line: where it stopped (the last batch committed, at the end offsets) and
    # the command that resumes.
    progress = read_progress(str(tmp_path / "checkpoint"))
    assert progress.end_offsets == {"bridge-kill": ends}
    assert progress.committed >= second.batches()[-1][0]
    assert lines[-1] == stop_line(progress, shlex.join(["ringlog", "spark-bridge",
                                                        *map(str, argv)]))
    second.assert_nothing_left(cluster.cluster_id)

    pinned = json.loads((tmp_path / "checkpoint" / PINNED_FILE).read_text())["bridge-kill"]
    assert sum(pinned.values()) >= 500  # records sent before the bridge started: not read
    expected = {(p, o): value for (p, o), value in acknowledged.items() if o >= pinned[str(p)]}
    rows, count = read_sink(tmp_path / "sink")
    assert count == len(rows), f"{count - len(rows)} rows are in the sink twice"
    assert set(rows) == set(expected)
    assert all(rows[at]["value"] == value for at, value in expected.items())
    first_rows = sum(rows for _, rows, _ in first.batches())
    assert 0 < first_rows < len(expected)  # the kill came mid-stream


class TransactionalProducer(BackgroundProducer):
    """Runs transactions of 30 records over every partition until stopped, one every
    50 ms: every third is aborted (after its records were written), the others committed.
    Remembers the values of each kind."""

    def __init__(self, cluster, topic, partitions):
        super().__init__(cluster, topic)
        self.partitions = partitions
        self.committed, self.aborted = set(), set()

    def run(self):
        try:
            with KafkaProducer(bootstrap_servers=self.cluster.bootstrap_servers,
                               transactional_id="bridge-upstream", linger_ms=5) as producer:
                producer.init_transactions()
                n = 0
                while not self.stopping.wait(0.05):
                    values = [b"t%05d-%02d" % (n, i) for i in range(30)]
                    producer.begin_transaction()
                    for i, value in enumerate(values):
                        producer.send(self.topic, value, partition=i % self.partitions)
                    if n % 3 == 2:
                        producer.flush(30)  # written to the log, then aborted
                        producer.abort_transaction()
                        self.aborted.update(values)
                    else:
                        producer.commit_transaction()
                        self.committed.update(values)
                    n += 1
        except BaseException as exc:  # reported by the test
            self.error = exc


def committed_ends(cluster, topic):
    """{partition as str: last stable offset} of ``topic`` now."""
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                       isolation_level="read_committed") as consumer:
        ends = consumer.end_offsets([TopicPartition(topic, p)
                                     for p in consumer.partitions_for_topic(topic)])
    return {str(tp.partition): offset for tp, offset in ends.items()}


@pytest.mark.multiprocess
@pytest.mark.spark
@pytest.mark.slow
def test_read_committed_bridge_sinks_each_committed_record_once_across_a_sigkill(
        cluster, bridges, tmp_path):
    create_topic(cluster, "bridge-txn", 3)
    argv = ["--bootstrap-server", cluster.bootstrap_servers, "--topic", "bridge-txn",
            "--sink", f"parquet:{tmp_path / 'sink'}", "--checkpoint", tmp_path / "checkpoint",
            "--trigger", "500ms", "--starting-offsets", "earliest",
            "--isolation-level", "read_committed"]
    upstream = TransactionalProducer(cluster, "bridge-txn", 3)
    upstream.start()
    try:
        first = bridges("first", *argv)
        first.wait_until(lambda: sum(1 for _, rows, _ in first.batches() if rows) >= 2,
                         "two batches with rows")
        first.process.kill()  # SIGKILL, transactions open and ending meanwhile
        assert first.wait_exit() == -signal.SIGKILL
        second = bridges("second", *argv)
        first.assert_nothing_left(cluster.cluster_id)
        second.wait_until(lambda: any(rows for _, rows, _ in second.batches()),
                          "a batch with rows after the restart")
    finally:
        upstream.finish()
    assert upstream.aborted and upstream.committed
    ends = committed_ends(cluster, "bridge-txn")  # nothing open any more: the log ends
    second.wait_until(lambda: second.batches()[-1][2] == {"bridge-txn": ends},
                      f"the end offsets {ends}")
    second.process.send_signal(signal.SIGTERM)
    assert second.wait_exit() == 0, second.err_path.read_text()[-3000:]
    second.assert_nothing_left(cluster.cluster_id)

    rows, count = read_sink(tmp_path / "sink")
    assert count == len(rows), f"{count - len(rows)} rows are in the sink twice"
    values = [row["value"] for row in rows.values()]
    assert len(values) == len(set(values))
    assert set(values) == upstream.committed  # none aborted, none missing
    first_rows = sum(rows for _, rows, _ in first.batches())
    assert 0 < first_rows < len(values)  # the kill came mid-stream


@pytest.mark.multiprocess
def test_latest_is_pinned_to_the_last_stable_offsets_with_read_committed(cluster, tmp_path):
    create_topic(cluster, "bridge-pin-txn", 1)
    for checkpoint in ("c", "u"):
        (tmp_path / checkpoint).mkdir()
    produce(cluster, "bridge-pin-txn", [b"before"])  # offset 0
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                       transactional_id="bridge-pin") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("bridge-pin-txn", b"open").get(30)  # offset 1, not yet stable
        committed = pin_starting_offsets(str(tmp_path / "c"), cluster.bootstrap_servers,
                                         "bridge-pin-txn", None, "read_committed")
        uncommitted = pin_starting_offsets(str(tmp_path / "u"), cluster.bootstrap_servers,
                                           "bridge-pin-txn", None, "read_uncommitted")
        producer.abort_transaction()
    assert json.loads(committed) == {"bridge-pin-txn": {"0": 1}}
    assert json.loads(uncommitted) == {"bridge-pin-txn": {"0": 2}}


@pytest.mark.parametrize("sink, message", [
    ("kafka:/tmp/x", "unknown sink kind 'kafka'"),
    ("parquet:", "the parquet sink needs a directory"),
    ("parquet", "must be KIND:PATH"),
    ("console:/tmp/x", "the console sink takes no path"),
])
def test_bad_sink_fails_before_spark_starts(tmp_path, capsys, sink, message):
    code = run_tool(spark_bridge_cmd, "--bootstrap-server", tmp_path, "--topic", "t",
                    "--sink", sink, "--checkpoint", tmp_path / "c")
    assert code == 1
    err = capsys.readouterr().err
    assert repr(sink) in err and message in err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("transform, message", [
    ("no_such_module_here:f", "cannot import module 'no_such_module_here'"),
    ("os:no_such_function", "'os' has no attribute 'no_such_function'"),
    ("os:sep", "is not callable: found str"),
    ("add_value_length", "must be module:function"),
])
def test_bad_transform_fails_before_spark_starts(tmp_path, capsys, monkeypatch, transform,
                                                message):
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_transform adds the cwd
    code = run_tool(spark_bridge_cmd, "--bootstrap-server", tmp_path, "--topic", "t",
                    "--sink", f"parquet:{tmp_path / 's'}", "--checkpoint", tmp_path / "c",
                    "--transform", transform)
    assert code == 1
    err = capsys.readouterr().err
    assert repr(transform) in err and message in err


@pytest.mark.parametrize("argv, message", [
    (["--trigger", "soon"], "--trigger 'soon' must be a number and a unit"),
    (["--fail-on-data-loss", "maybe"], "--fail-on-data-loss must be true or false, "
                                       "found 'maybe'"),
    (["--isolation-level", "committed"], "--isolation-level must be read_uncommitted or "
                                         "read_committed, found 'committed'"),
])
def test_bad_trigger_or_source_flag_fails(tmp_path, capsys, argv, message):
    code = run_tool(spark_bridge_cmd, "--bootstrap-server", tmp_path, "--topic", "t",
                    "--sink", f"parquet:{tmp_path / 's'}", "--checkpoint", tmp_path / "c",
                    *argv)
    assert code == 1
    assert message in capsys.readouterr().err


def test_trigger_intervals():
    assert [spark_bridge_cmd.parse_interval(t) for t in ("250ms", "1s", "2.5s", "1m")] == [
        250, 1000, 2500, 60_000]


def test_parse_sink_kinds(tmp_path):
    assert parse_sink(f"parquet:{tmp_path}") == Sink("parquet", "parquet", str(tmp_path))
    assert parse_sink("JSON:rel/dir") == Sink("json", "json", os.path.abspath("rel/dir"))
    assert parse_sink("console:") == Sink("console", "console", None)
    with pytest.raises(SinkSpecError, match="expected one of parquet, json, csv, console"):
        parse_sink("delta:/x")


def test_transform_is_loaded_and_shared_with_spark_workers(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert load_transform(TRANSFORM) is add_value_length
    assert os.environ["PYTHONPATH"].split(os.pathsep) == ["/elsewhere", ROOT]


def test_transform_must_return_a_dataframe():
    with pytest.raises(TransformError, match="'m:f' returned list, expected a DataFrame"):
        apply_transform(lambda df: [df], "m:f", object())


@pytest.mark.multiprocess
def test_latest_is_pinned_to_the_end_offsets_once_per_checkpoint(cluster, tmp_path):
    create_topic(cluster, "bridge-pin", 2)
    produced = produce(cluster, "bridge-pin", [b"a%d" % n for n in range(40)])
    ends = {str(p): max(o for q, o in produced if q == p) + 1 for p in range(2)}
    pinned = pin_starting_offsets(str(tmp_path), cluster.bootstrap_servers, "bridge-pin")
    assert json.loads(pinned) == {"bridge-pin": ends}
    produce(cluster, "bridge-pin", [b"b%d" % n for n in range(40)])
    for spec in (None, "latest", " LATEST"):  # a restart: the same offsets, not the new end
        assert pin_starting_offsets(str(tmp_path), cluster.bootstrap_servers, "bridge-pin",
                                    spec) == pinned
    assert pin_starting_offsets(str(tmp_path / "x"), cluster.bootstrap_servers, "bridge-pin",
                                "earliest") == "earliest"
    assert pin_starting_offsets(str(tmp_path / "y"), cluster.bootstrap_servers,
                                "no-such-topic") == "latest"
    assert not (tmp_path / "y" / PINNED_FILE).exists()


def test_a_checkpoint_resumes_once_spark_committed_a_batch(tmp_path):
    assert not resumes(str(tmp_path / "new"))
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / ".0.tmp").write_text("")
    assert not resumes(str(tmp_path))  # batch 0 planned, not finished: startingOffsets apply
    (tmp_path / "commits" / "0").write_text("v1\n{}")
    assert resumes(str(tmp_path))


# -- the file sink's metadata log ----------------------------------------------------------------

def write_entry(log_dir, name, files, mtime_ns):
    lines = ["v1"] + [json.dumps({"path": f"file://{f}", "size": 1, "isDir": False,
                                  "modificationTime": 0, "blockReplication": 1,
                                  "blockSize": 1, "action": "add"}) for f in files]
    path = log_dir / name
    path.write_text("\n".join(lines))
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_sink_log_follows_compaction_and_skips_uncommitted_files(tmp_path):
    log_dir = tmp_path / sink_log.METADATA_DIR
    log_dir.mkdir()
    # Entries 0-8 were deleted after compaction; 9.compact lists every file up to batch 9.
    write_entry(log_dir, "9.compact", ["/s/a", "/s/b", "/s/c"], 9_000)
    write_entry(log_dir, "10", ["/s/d"], 10_000)
    write_entry(log_dir, "11", ["/s/with%20space", "/s/e"], 11_000)
    (log_dir / ".12.tmp").write_text("v1\n")  # an entry being written: not committed
    (tmp_path / "part-orphan.parquet").write_text("")  # an attempt killed before commit
    batches = sink_log.committed_batches(str(tmp_path))
    assert batches == [
        sink_log.CommittedBatch(9, ("/s/a", "/s/b", "/s/c"), 9_000),
        sink_log.CommittedBatch(10, ("/s/d",), 10_000),
        sink_log.CommittedBatch(11, ("/s/with space", "/s/e"), 11_000)]
    assert sink_log.committed_files(str(tmp_path)) == [
        "/s/a", "/s/b", "/s/c", "/s/d", "/s/with space", "/s/e"]


def test_sink_log_errors_name_the_problem(tmp_path):
    with pytest.raises(sink_log.SinkLogError, match="has no _spark_metadata directory"):
        sink_log.committed_batches(str(tmp_path))
    (tmp_path / sink_log.METADATA_DIR).mkdir()
    (tmp_path / sink_log.METADATA_DIR / "0").write_text("v2\n{}")
    with pytest.raises(sink_log.SinkLogError, match="expected 'v1' on the first line, "
                                                    "found 'v2'"):
        sink_log.committed_batches(str(tmp_path))


# -- waiting for an earlier bridge's processes ----------------------------------------------------

@pytest.mark.multiprocess
def test_wait_for_recorded_waits_for_a_live_process_and_ignores_dead_ones(tmp_path):
    path = tmp_path / "processes"
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        jvm.record_processes(path, [psutil.Process(sleeper.pid)])
        waited = []
        threading.Timer(0.3, sleeper.kill).start()
        assert jvm.wait_for_recorded(path, timeout=20, on_wait=waited.append) == 1
        assert [p.pid for p in waited[0]] == [sleeper.pid]
        sleeper.wait(10)
        assert jvm.wait_for_recorded(path, timeout=20) == 0  # dead now: nothing to wait for
    finally:
        sleeper.kill()
        sleeper.wait(10)


@pytest.mark.multiprocess
def test_wait_for_recorded_gives_up_naming_the_pids(tmp_path):
    path = tmp_path / "processes"
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        jvm.record_processes(path, [psutil.Process(sleeper.pid)])
        with pytest.raises(jvm.PreviousBridgeRunning, match=rf"processes \[{sleeper.pid}\]"):
            jvm.wait_for_recorded(path, timeout=0.2)
    finally:
        sleeper.kill()
        sleeper.wait(10)
    assert jvm.wait_for_recorded(tmp_path / "none") == 0  # no earlier bridge


def test_jvm_stderr_is_copied_without_the_incubator_notice(capfd):
    pipe = io.BytesIO(b"WARNING: Using incubator modules: jdk.incubator.vector\n"
                      b"12:00:00 ERROR Executor: a real error\n\tat X.y(X.java:1)\n")
    jvm._copy_stderr(pipe)
    assert capfd.readouterr().err == "12:00:00 ERROR Executor: a real error\n\tat X.y(X.java:1)\n"
    assert pipe.closed


def test_jvm_stderr_is_drained_when_ours_is_gone(monkeypatch):
    written = []

    def broken(fd, data):
        written.append(data)
        raise BrokenPipeError(32, "Broken pipe")
    monkeypatch.setattr(jvm.os, "write", broken)
    jvm._copy_stderr(io.BytesIO(b"one\ntwo\nthree\n"))
    assert written == [b"one\n", b"two\n", b"three\n"]  # read to the end: the JVM never blocks
