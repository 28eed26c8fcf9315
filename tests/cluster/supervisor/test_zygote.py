"""The zygote (cluster.supervisor.zygote): a forked child runs as ``python -m`` would, its exit
status reaches the supervisor, the zygote's death takes no broker with it; and a broker it
forks is a full broker the supervisor stops, restarts and watches like an exec'd one.

Every test bounds its waits, kills what it started by pid and leaves no shared memory.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

import psutil
import pytest

from cluster import KafkaConsumer, KafkaProducer
from cluster.admin.kafka_admin_client import KafkaAdminClient, NewTopic
from cluster.metadata import data_dir as dd
from cluster.supervisor import zygote
from cluster.supervisor.cluster import Cluster
from cluster.supervisor.supervisor import BROKER_COMMAND, Supervisor, read_record
from shm_ring.liveness import process_start_time
from shm_ring.naming import cleanup_stale, list_objects
from tests.support.bounds import BOUND
from tests.support.clock import FakeClock

CHILD = "tests.cluster.supervisor.zygote_child"
BROKER = BROKER_COMMAND[2]


def running(pid):
    return process_start_time(pid) is not None


def wait_until(predicate, what):
    deadline = time.monotonic() + BOUND
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not within {BOUND} s"
        time.sleep(0.01)


@pytest.fixture
def zygote_of():
    """``make(module)`` -> a started Zygote of its own; afterwards it is closed and every
    child it forked killed by pid."""
    made, children = [], []

    def make(module):
        z = zygote.Zygote(module).start()
        made.append(z)
        return z
    make.children = children
    yield make
    for z in made:
        z.close()
    for pid in children:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def spawn(z, children, log_path, *args, umask=0o077):
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        child = z.spawn(list(args), fd, umask)
    finally:
        os.close(fd)
    children.append(child.pid)
    return child


@pytest.mark.multiprocess
def test_a_forked_child_runs_as_python_m_would(zygote_of, tmp_path, monkeypatch):
    z = zygote_of(CHILD)
    monkeypatch.setenv("ZYGOTE_TEST_VALUE", "set after the zygote started")
    report, log = tmp_path / "report.json", tmp_path / "child.log"
    child = spawn(z, zygote_of.children, log, "report", str(report), umask=0o027)
    assert child.wait(BOUND) == 0 and child.returncode == 0
    seen = json.loads(report.read_text())
    assert seen["pid"] == child.pid and seen["ppid"] == z.pid
    assert seen["sid"] == child.pid  # a session of its own, as start_new_session
    assert seen["umask"] == 0o027 and seen["cwd"] == os.getcwd()
    assert seen["argv"][1:] == ["report", str(report)]
    assert seen["argv"][0].endswith("zygote_child.py")
    assert seen["env"] == "set after the zygote started"
    assert set(seen["fds"]) <= {0, 1, 2, 3}  # 3: the listing's own; no socket, no pidfd
    assert log.read_text() == "reported\n"


@pytest.mark.multiprocess
def test_exit_statuses_reach_the_supervisor_as_popen_says_them(zygote_of, tmp_path):
    z = zygote_of(CHILD)
    log = tmp_path / "child.log"
    assert spawn(z, zygote_of.children, log, "exit", "3").wait(BOUND) == 3
    assert spawn(z, zygote_of.children, log, "raise").wait(BOUND) == 1
    assert "RuntimeError: asked to raise" in log.read_text()
    sleeper = spawn(z, zygote_of.children, log, "sleep")
    assert sleeper.poll() is None
    sleeper.terminate()
    assert sleeper.wait(BOUND) == -signal.SIGTERM
    sleeper.kill()  # safe once it is gone: no signal reaches another process


@pytest.mark.multiprocess
def test_a_dead_zygote_takes_no_child_with_it(zygote_of, tmp_path):
    z = zygote_of(CHILD)
    sleeper = spawn(z, zygote_of.children, tmp_path / "child.log", "sleep")
    os.kill(z.pid, signal.SIGKILL)
    z.process.wait(BOUND)
    time.sleep(0.1)
    assert running(sleeper.pid) and sleeper.poll() is None
    sleeper.kill()
    assert sleeper.wait(BOUND) == zygote.EXIT_UNKNOWN  # no longer its zygote's to report
    assert not running(sleeper.pid)


def test_a_module_that_starts_threads_at_import_is_refused(zygote_of, tmp_path):
    z = zygote_of("tests.cluster.supervisor.zygote_threaded")
    fd = os.open(tmp_path / "child.log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(zygote.ZygoteUnavailable, match="thread"):
            z.spawn(["x"], fd, 0o077, timeout=BOUND)
    finally:
        os.close(fd)


# -- real brokers -------------------------------------------------------------------------------

@pytest.fixture
def data_dir(tmp_path):
    """A data directory; afterwards every broker it recorded is killed by pid and its
    cluster's shared memory removed — the test fails if that was needed."""
    path = tmp_path / "cluster"
    yield path
    leftovers = []
    for broker_id in dd.broker_ids(path):
        pid = (dd.read_broker_state(path, broker_id) or {}).get("pid")
        if isinstance(pid, int) and running(pid):
            leftovers.append(pid)
            os.kill(pid, signal.SIGKILL)
    cluster_id = dd.read_cluster_id(path)
    if cluster_id is not None:
        leftovers += cleanup_stale(cluster_id)
    assert leftovers == []


def roundtrip(cluster, topic, count=100):
    """Produce ``count`` records to ``topic`` and read them back: their values."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
    for i in range(count):
        producer.send(topic, str(i).encode())
    producer.flush(timeout=BOUND)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap_servers,
                             auto_offset_reset="earliest", consumer_timeout_ms=BOUND * 1000)
    try:
        return [next(consumer).value for _ in range(count)]
    finally:
        consumer.close()


@pytest.mark.multiprocess
def test_a_forked_broker_is_a_full_broker(data_dir):
    with Cluster(data_dir, brokers=1, profile="dev") as cluster:
        pid = cluster.pids()[0]
        assert psutil.Process(pid).ppid() == zygote.shared(BROKER).pid
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            assert file.read().startswith(
                b"\0".join([os.fsencode(a) for a in BROKER_COMMAND] + [b"--data-dir"]))
        cluster.metadata()  # serving, alive in the page
        with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
            admin.create_topics([NewTopic("t", 2, 1)], wait_for_metadata=True)
        assert sorted(roundtrip(cluster, "t"), key=int) == [str(i).encode()
                                                             for i in range(100)]
        with open(os.path.join(dd.broker_dir(data_dir, 0), dd.BROKER_LOG)) as file:
            assert "start-up: process" in file.read()
        cluster_id = cluster.cluster_id
    assert not running(pid)
    assert read_record(data_dir)["broker_states"]["0"]["exit"] == "exit code 0"
    assert list_objects(cluster_id) == []


@pytest.mark.multiprocess
def test_the_supervisor_restarts_a_crashed_forked_broker(data_dir):
    clock = FakeClock(100.0)
    supervisor = Supervisor(data_dir, [0], {"ringlog.fsync": False},
                            restart_on_failure=True, clock=clock)
    supervisor.start()
    try:
        old = supervisor.pids()[0]
        os.kill(old, signal.SIGKILL)  # as chaos kills a broker: by pid
        wait_until(lambda: not supervisor.pids(), "the killed broker reaped")
        supervisor.watch()
        state = read_record(data_dir)["broker_states"]["0"]
        assert (state["state"], state["exit"]) == ("crashed", "killed by SIGKILL")
        clock.advance(1.0)
        supervisor.watch()
        new = supervisor.pids()[0]
        assert new != old
        wait_until(lambda: (dd.read_broker_state(data_dir, 0) or {}).get("pid") == new
                   and supervisor.page.read().brokers[0].pid == new
                   and supervisor.page.read().brokers[0].alive, "the restarted broker alive")
    finally:
        supervisor.stop()
    assert list_objects(supervisor.cluster_id) == []


@pytest.mark.multiprocess
def test_killing_the_zygote_kills_no_broker_and_leaves_nothing(data_dir):
    with Cluster(data_dir, brokers=1, profile="dev") as cluster:
        z = zygote.shared(BROKER)
        pid = cluster.pids()[0]
        os.kill(z.pid, signal.SIGKILL)
        z.process.wait(BOUND)
        assert running(pid) and cluster.pids() == {0: pid}
        with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
            admin.create_topics([NewTopic("t", 1, 1)], wait_for_metadata=True)
        assert len(roundtrip(cluster, "t", 10)) == 10
        cluster.kill_broker(0)  # seen through its pidfd, its zygote gone
        assert not running(pid)
        cluster.start_broker(0)  # alone, from a new zygote
        assert zygote.shared(BROKER).pid != z.pid
        assert len(roundtrip(cluster, "t", 10)) == 10  # the old ten are read first
        again = cluster.pids()[0]
        cluster_id = cluster.cluster_id
    assert not running(again)
    assert list_objects(cluster_id) == []


@pytest.mark.multiprocess
def test_with_zygotes_off_brokers_are_exec_d_as_before(data_dir, monkeypatch):
    monkeypatch.setenv(zygote.ENABLE_ENV, "0")
    with Cluster(data_dir, brokers=1, profile="dev") as cluster:
        pid = cluster.pids()[0]
        assert psutil.Process(pid).ppid() == os.getpid()
        assert cluster.metadata().brokers[0].alive
        cluster_id = cluster.cluster_id
    assert read_record(data_dir)["broker_states"]["0"]["exit"] == "exit code 0"
    assert list_objects(cluster_id) == []


PROBE = "zygote_stale_probe"
PROBE_MAIN = '''import json, os, sys
from zygote_stale_probe import VERSION
if __name__ == "__main__":
    with open(sys.argv[1], "w") as file:
        json.dump({"version": VERSION, "ppid": os.getppid()}, file)
'''


@pytest.mark.multiprocess
def test_code_changed_on_disk_gets_a_new_zygote_before_the_next_fork(tmp_path, monkeypatch):
    """An upgrade then a broker restarted alone (``ringlog broker stop``/``start``) runs the
    code on disk: the zygote that imported the old code forks nothing and is replaced."""
    package = tmp_path / PROBE
    package.mkdir()
    (package / "__init__.py").write_text("VERSION = 1\n")
    (package / "__main__.py").write_text(PROBE_MAIN)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    report, log = tmp_path / "report.json", tmp_path / "probe.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    started = []
    try:
        def run():
            child = zygote.fork([sys.executable, "-m", PROBE, str(report)], fd)
            assert child is not None, log.read_text()
            started.append(child.pid)
            assert child.wait(BOUND) == 0, log.read_text()
            return json.loads(report.read_text())

        first = run()
        assert first["version"] == 1 and first["ppid"] == zygote.shared(PROBE).pid
        assert run()["ppid"] == first["ppid"]  # unchanged code: the same zygote forks
        init = package / "__init__.py"
        init.write_text("VERSION = 22\n")  # another size, and a later mtime for certain
        later = init.stat().st_mtime_ns + 2_000_000_000
        os.utime(init, ns=(later, later))
        second = run()
        assert second["version"] == 22
        assert second["ppid"] != first["ppid"] and not running(first["ppid"])
    finally:
        os.close(fd)
        zygote.replace_shared(PROBE)
        for pid in started:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
