"""`make demo` end to end: on a small scale the cluster stage and the Spark stage pass, twice
in a row on the same directory, and nothing of the demo is left running or in /dev/shm (the
demo checks both and says so). Before it starts anything it refuses a directory a running
cluster holds or that it did not make, and a machine without Java; every refusal is the
last line, ``demo FAILED: <reason>``."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from cluster import KafkaConsumer, KafkaProducer, TopicPartition
from cluster.metadata import data_dir as dd
from cluster.supervisor.supervisor import stop_cluster
from shm_ring.liveness import process_start_time
from spark_bridge.demo import JAVA_PACKAGE, MARKER, claim_data_dir
from tests.support.bounds import BOUND, DEMO_BOUND
from tests.support.paths import ROOT


def run_demo(data_dir, env=None, timeout=DEMO_BOUND):
    """Run the small demo on ``data_dir``; return its exit code and its output."""
    command = [sys.executable, "-m", "spark_bridge.demo", "--data-dir", str(data_dir),
               "--records", "2000"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, env=env,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:  # Spark is in the demo's session, its brokers in their own
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            stop_cluster(data_dir)
    return process.returncode, out


def last_line(out):
    return out.rstrip().splitlines()[-1]


def process_table(out):
    """{(role, name, pid): [peak RSS MiB, GC collections "g0/g1/g2", longest GC ms, CPU s]} of
    the per-process table the demo ends with (the lines between its heading and the last)."""
    lines = out.rstrip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("7. per process"))
    assert lines[start + 1].split()[:3] == ["ROLE", "NAME", "PID"]
    rows = {}
    for line in lines[start + 2:-1]:
        role, name, pid, rss, collections, pause, cpu = line.split()
        rows[role, name, int(pid)] = [float(rss), collections, float(pause), float(cpu)]
    return rows


# The demo runs a cluster and a Spark stage, for tens of seconds; twice here.
@pytest.mark.multiprocess
@pytest.mark.spark
@pytest.mark.slow
def test_the_demo_passes_twice_in_a_row_on_its_directory(tmp_path):
    for _ in range(2):
        code, out = run_demo(tmp_path / "demo-data")
        assert code == 0, out
        assert "exactly once: 0 missing, 0 duplicated" in out
        assert "counts per key equal to what the producers sent" in out
        assert "0 of its processes still running, 0 shared-memory objects left" in out
        assert last_line(out) == "demo passed"
        table = process_table(out)
        assert {("broker", f"broker-{n}") for n in range(3)} <= {k[:2] for k in table}
        # the Spark source's partition readers publish as spark-reader; a Spark worker that
        # lives less than one sampling interval may be missed, so one is enough
        assert any(role in ("consumer", "spark-reader") for role, _, _ in table)
        for rss, collections, pause, cpu in table.values():
            assert rss > 0 and cpu > 0 and pause >= 0
            assert len(collections.split("/")) == 3
    assert (tmp_path / "demo-data" / MARKER).is_file()


def files_of(data_dir):
    """{path relative to ``data_dir``: bytes} of the files that record the cluster and its
    records (not the ones a running broker rewrites on its own: state, checkpoints, logs)."""
    kept = {}
    for directory, _, names in os.walk(data_dir):
        for name in names:
            if name.endswith((".log", ".index", ".timeindex", "meta.properties")):
                path = os.path.join(directory, name)
                with open(path, "rb") as file:
                    kept[os.path.relpath(path, data_dir)] = file.read()
    return kept


@pytest.mark.multiprocess
def test_the_demo_refuses_a_directory_a_running_cluster_holds(e2e):
    cluster = e2e.cluster(brokers=2, name="demo-data")
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        for n in range(10):
            producer.send("kept", b"record-%d" % n)
        producer.flush(BOUND)
    pids, before = cluster.pids(), files_of(cluster.data_dir)
    code, out = run_demo(cluster.data_dir, timeout=BOUND)
    assert code == 1, out
    assert last_line(out) == (
        f"demo FAILED: a ringlog cluster is running in {cluster.data_dir} (brokers (id: pid) "
        f"{pids}, supervisor pid {os.getpid()}); stop it with: ringlog cluster stop "
        f"--data-dir {cluster.data_dir} (or give the demo another --data-dir)")
    assert "ringlog demo: cluster" not in out  # it started nothing
    assert cluster.pids() == pids
    assert files_of(cluster.data_dir) == before
    assert not os.path.exists(os.path.join(cluster.data_dir, MARKER))
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                       auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("kept", 0)])
        assert consumer.end_offsets([TopicPartition("kept", 0)]) == {
            TopicPartition("kept", 0): 10}


@pytest.mark.parametrize("state", ["starting", "serving", "stopping"])
def test_a_live_supervisor_holds_the_directory_even_with_no_broker_running(tmp_path, state):
    (tmp_path / MARKER).write_text("")
    record = {"state": state, "supervisor": "embedded", "supervisor_pid": os.getpid(),
              "supervisor_start_time": process_start_time(os.getpid())}
    dd.write_json(str(tmp_path / dd.CLUSTER_JSON), record)
    assert claim_data_dir(str(tmp_path)) == (
        f"a ringlog cluster is running in {tmp_path} (supervisor pid {os.getpid()}); stop it "
        f"with: ringlog cluster stop --data-dir {tmp_path} (or give the demo another --data-dir)")
    assert sorted(os.listdir(tmp_path)) == sorted([MARKER, dd.CLUSTER_JSON])
    dd.write_json(str(tmp_path / dd.CLUSTER_JSON), {**record, "state": "stopped"})
    assert claim_data_dir(str(tmp_path)) is None  # the demo's own, stopped: made afresh
    assert os.listdir(tmp_path) == [MARKER]


@pytest.mark.multiprocess
def test_the_demo_never_deletes_a_directory_it_did_not_make(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    code, out = run_demo(mine, timeout=BOUND)
    assert code == 1, out
    assert last_line(out) == (
        f"demo FAILED: {mine} exists and the demo did not make it (no {MARKER} in it), so it "
        f"will not delete it: give the demo another --data-dir, or remove it yourself")
    assert sorted(os.listdir(mine)) == ["notes.txt"]
    assert (mine / "notes.txt").read_text() == "keep me"


@pytest.mark.multiprocess
@pytest.mark.parametrize("java_home", [None, "no-java-here"])
def test_without_java_the_demo_stops_before_starting_anything(tmp_path, java_home):
    no_java = tmp_path / "bin"
    no_java.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(no_java)
    if java_home is not None:
        env["JAVA_HOME"] = str(tmp_path / java_home)
    code, out = run_demo(tmp_path / "demo-data", env=env, timeout=BOUND)
    assert code == 1, out
    assert out.count("\n") == 1, out  # one line
    if java_home is None:
        assert last_line(out) == (
            f"demo FAILED: Spark needs a Java runtime and there is none (no java on PATH, "
            f"JAVA_HOME unset); install one with: sudo apt-get install -y {JAVA_PACKAGE}")
    else:
        assert last_line(out).startswith(
            f"demo FAILED: JAVA_HOME={tmp_path / java_home} has no bin/java")
    assert not (tmp_path / "demo-data").exists()  # no cluster, not even its directory


def test_the_demo_makes_its_directory_private_as_the_cluster_would(tmp_path, caplog):
    data_dir = str(tmp_path / "demo-data")
    assert claim_data_dir(data_dir) is None
    assert os.stat(data_dir).st_mode & 0o777 == 0o700
    assert os.stat(os.path.join(data_dir, MARKER)).st_mode & 0o777 == 0o600
    dd.make_data_dir(data_dir)  # what the cluster's start does next: nothing to warn about
    assert "other users can list it" not in caplog.text
