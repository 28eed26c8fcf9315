"""Cluster and the supervisor: start, stop, kill, restart, failures, and `ringlog cluster`.

The lifecycle tests run twice: with a stand-in broker (stand_in_broker.py in this folder:
the broker lock, broker.json and a Controller, nothing else) and with the real one
(``python -m replica_proc``). Every test bounds its waits, kills whatever it started by pid
and sweeps the cluster's shared memory, even when it fails.
"""
from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import time

import psutil
import pytest

from cluster.errors import InvalidConfigurationError, KafkaStorageError
from cluster.metadata import data_dir as dd
from cluster.metadata.lock_holders import command_line
from cluster.supervisor.cluster import Cluster
from cluster.supervisor.supervisor import (
    BROKER_COMMAND,
    BrokerCountError,
    ClusterStartError,
    DataDirInUseError,
    RestartBackoff,
    Supervisor,
    cluster_status,
    read_record,
    stop_cluster,
    supervising,
)
from shm_ring.liveness import process_start_time
from shm_ring.naming import cleanup_stale, list_objects
from tests.support.bounds import BOUND
from tests.support.clock import FakeClock

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = [sys.executable, os.path.join(HERE, "stand_in_broker.py")]
COMMANDS = {"fake": FAKE, "real": list(BROKER_COMMAND)}
CLI = """
import argparse, sys
from cluster.tools import cluster_cmd
parser = argparse.ArgumentParser(prog="ringlog cluster")
cluster_cmd.add_arguments(parser)
sys.exit(cluster_cmd.run(parser.parse_args()))
"""


def running(pid):
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    return process_start_time(pid) is not None


def _command_line(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


@pytest.fixture
def data_dir(tmp_path):
    """A data directory; afterwards every process it recorded is killed and its cluster's
    shared memory removed — the test fails if it had to."""
    path = tmp_path / "cluster"
    yield path
    leftovers = []
    pids = [read_record(path).get("supervisor_pid")]
    pids += [(dd.read_broker_state(path, b) or {}).get("pid") for b in dd.broker_ids(path)]
    for pid in pids:
        if isinstance(pid, int) and pid != os.getpid() and running(pid):
            leftovers.append((pid, _command_line(pid)))
            os.kill(pid, signal.SIGKILL)
    cluster_id = dd.read_cluster_id(path)
    if cluster_id is not None:
        leftovers += cleanup_stale(cluster_id)
    assert leftovers == [], f"the test left {leftovers} behind"


@pytest.fixture(params=sorted(COMMANDS))
def command(request):
    return COMMANDS[request.param]


def cli(*args, timeout=BOUND):
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True,
                          timeout=timeout)


# -- lifecycle --------------------------------------------------------------------------------

@pytest.mark.multiprocess
def test_start_serves_and_stop_leaves_nothing(data_dir, command):
    cluster = Cluster(data_dir, brokers=3, broker_command=command, num_partitions=2)
    with cluster:
        pids = cluster.pids()
        assert sorted(pids) == [0, 1, 2] and all(running(p) for p in pids.values())
        image = cluster.metadata()
        assert image.controller_id in pids and image.live_brokers() == [0, 1, 2]
        assert {b.id: b.pid for b in image.brokers.values()} == pids
        assert cluster.bootstrap_servers == str(data_dir)
        assert cluster.cluster_id == dd.read_cluster_id(data_dir)
        assert list_objects(cluster.cluster_id)  # the page, the listeners
        record = read_record(data_dir)
        assert record["state"] == "serving" and record["supervisor"] == "embedded"
        assert record["pids"] == {str(b): p for b, p in pids.items()}
        assert record["config"] == {"num.partitions": "2"}
        with open(f"/proc/{pids[1]}/cmdline", "rb") as f:
            assert b"--override\x00num.partitions=2\x00" in f.read()
        assert os.path.getsize(dd.broker_dir(data_dir, 0) + "/broker.log") > 0
    assert not any(running(p) for p in pids.values())
    assert list_objects(cluster.cluster_id) == []
    assert read_record(data_dir)["state"] == "stopped"
    assert cluster.pids() == {}
    cluster.stop()  # safe twice


@pytest.mark.multiprocess
def test_a_killed_broker_goes_offline_and_comes_back(data_dir, command):
    with Cluster(data_dir, brokers=2, broker_command=command) as cluster:
        first = cluster.metadata().controller_id
        old = cluster.pids()[first]
        cluster.kill_broker(first)
        assert not running(old) and first not in cluster.pids()
        image = cluster.wait_for_metadata(
            lambda i: i.controller_id == 1 - first and not i.brokers[first].alive, BOUND)
        assert image.live_brokers() == [1 - first]
        with pytest.raises(ValueError, match=f"broker {first} is not running"):
            cluster.kill_broker(first)
        cluster.start_broker(first)
        new = cluster.pids()[first]
        assert new != old
        image = cluster.metadata()
        assert image.brokers[first].alive and image.brokers[first].pid == new
        with pytest.raises(ValueError, match=f"broker {first} is already running"):
            cluster.start_broker(first)
    assert list_objects(cluster.cluster_id) == []


@pytest.mark.multiprocess
def test_starting_again_keeps_the_cluster_id_and_the_metadata(data_dir, command):
    with Cluster(data_dir, brokers=1, broker_command=command) as cluster:
        cluster_id = cluster.cluster_id
        version = cluster.metadata().version
    with Cluster(data_dir, brokers=1, broker_command=command) as again:
        assert again.cluster_id == cluster_id
        assert again.metadata().version > version  # the log was replayed, not restarted


@pytest.mark.multiprocess
def test_a_stopped_cluster_restarts_with_every_broker_it_knows(data_dir):
    start_detached(data_dir, 3)
    assert cli("stop", "--data-dir", str(data_dir)).returncode == 0

    again = cli("start", "--data-dir", str(data_dir), "--detach", "--broker-command",
                " ".join(FAKE))  # no --brokers: all three come back
    try:
        assert again.returncode == 0, again.stderr
        assert "brokers: 3" in again.stdout
        assert sorted(read_record(data_dir)["pids"]) == ["0", "1", "2"]
        assert status_rows(data_dir)[0] == 0
    finally:
        assert cli("stop", "--data-dir", str(data_dir)).returncode == 0

    fewer = cli("start", "--data-dir", str(data_dir), "--brokers", "1", "--detach",
                "--broker-command", " ".join(FAKE))
    assert fewer.returncode == 2, fewer.stdout
    assert fewer.stderr.splitlines() == [
        f"--brokers 1: the cluster in {data_dir} has 3 brokers (ids 0, 1, 2), not the 1 asked "
        f"for: leave the broker count out to start all 3, or use a new data directory for a "
        f"cluster of 1; a restart neither adds nor drops brokers"]
    assert not supervising(read_record(data_dir))

    assert Cluster(data_dir, broker_command=FAKE).broker_ids == [0, 1, 2]
    assert Cluster(data_dir, brokers=3, broker_command=FAKE).broker_ids == [0, 1, 2]
    with pytest.raises(BrokerCountError, match="has 3 brokers .*not the 2 asked for"):
        Cluster(data_dir, brokers=2, broker_command=FAKE)


@pytest.mark.multiprocess
def test_topics_survive_a_restart(data_dir):
    creating = FAKE + ["--create-topic", "t:3"]
    with Cluster(data_dir, brokers=2, broker_command=creating) as cluster:
        topic = cluster.wait_for_metadata(lambda i: "t" in i.topics, BOUND).topics["t"]
    with Cluster(data_dir, brokers=2, broker_command=FAKE) as again:
        image = again.wait_for_metadata(
            lambda i: all(p.online for p in i.topics["t"].partitions), BOUND)
        restarted = image.topics["t"]
        assert restarted.topic_id == topic.topic_id
        assert [p.replicas for p in restarted.partitions] == [
            p.replicas for p in topic.partitions]


# -- failures ---------------------------------------------------------------------------------

@pytest.mark.multiprocess
def test_a_broker_that_exits_while_starting_fails_the_start_and_nothing_is_left(data_dir):
    cluster = Cluster(data_dir, brokers=2, broker_command=FAKE + ["--exit-code", "3"])
    with pytest.raises(ClusterStartError) as failure:
        cluster.start()
    message = str(failure.value)
    assert "exited with code 3 while starting" in message
    assert "failing on purpose" in message  # the tail of its log
    assert cluster.pids() == {}
    assert list_objects(cluster.cluster_id) == []


@pytest.mark.multiprocess
def test_a_broker_that_never_serves_times_out_and_is_stopped(data_dir):
    # The bound leaves a loaded machine time to start the fake broker's Python, so its
    # log line is there to quote.
    cluster = Cluster(data_dir, brokers=1, broker_command=FAKE + ["--never-serve"],
                      start_timeout=5.0)
    with pytest.raises(ClusterStartError, match=r"brokers \[0\] did not report serving in "
                                                r"broker.json within 5.0 s") as failure:
        cluster.start()
    assert "fake broker 0 registered" in str(failure.value)
    assert cluster.pids() == {}
    assert read_record(data_dir)["state"] == "stopped"


@pytest.mark.multiprocess
def test_a_second_cluster_on_a_running_directory_is_refused(data_dir):
    with Cluster(data_dir, brokers=1, broker_command=FAKE) as cluster:
        pid = cluster.pids()[0]
        record = read_record(data_dir)
        with pytest.raises(DataDirInUseError) as failure:
            Cluster(data_dir, brokers=1, broker_command=FAKE).start()
        assert str(failure.value) == (
            f"a cluster supervisor is already running on {data_dir}: {data_dir}/supervisor.lock "
            f"is held by pid {os.getpid()} (command {command_line(os.getpid())}); `ringlog "
            f"cluster status --data-dir {data_dir}` reports it, `ringlog cluster stop "
            f"--data-dir {data_dir}` stops it")
        assert cluster.pids() == {0: pid} and read_record(data_dir) == record
    with Cluster(data_dir, brokers=1, broker_command=FAKE):  # stop() let go of the lock
        pass


@pytest.mark.multiprocess
def test_orphan_brokers_of_a_killed_supervisor_are_refused(data_dir):
    started = cli("start", "--data-dir", str(data_dir), "--brokers", "1", "--detach",
                  "--broker-command", " ".join(FAKE))
    assert started.returncode == 0, started.stderr
    record = read_record(data_dir)
    os.kill(record["supervisor_pid"], signal.SIGKILL)  # its lock goes, its broker stays
    deadline = time.monotonic() + BOUND
    while running(record["supervisor_pid"]) and time.monotonic() < deadline:
        time.sleep(0.01)  # reaped by init
    broker = record["pids"]["0"]
    with pytest.raises(ClusterStartError, match=rf"already running in .*: brokers "
                                                rf"\{{0: {broker}\}}"):
        Cluster(data_dir, brokers=1, broker_command=FAKE).start()
    assert running(broker)
    assert cli("stop", "--data-dir", str(data_dir)).returncode == 0


def test_config_is_checked_before_any_process_starts(data_dir):
    cluster = Cluster(data_dir, config={"log.retention.hours": 1}, auto_create_topics_enable=False)
    assert cluster.config == {"log.retention.hours": 1, "auto.create.topics.enable": False}
    with pytest.raises(TypeError, match="unknown broker config 'num_partition' "
                                        r"\(as Kafka's key: 'num.partition'\)"):
        Cluster(data_dir, num_partition=3)
    with pytest.raises(TypeError, match="'num.partitions' given twice"):
        Cluster(data_dir, config={"num.partitions": 1}, num_partitions=2)
    with pytest.raises(InvalidConfigurationError, match="num.partitions"):
        Cluster(data_dir, num_partitions=0)
    with pytest.raises(ValueError, match="broker.id"):
        Cluster(data_dir, config={"broker.id": 3})
    with pytest.raises(ValueError, match="brokers must be an int >= 1, found 0"):
        Cluster(data_dir, brokers=0)
    assert not data_dir.exists()


@pytest.mark.multiprocess
def test_stop_cluster_from_elsewhere_stops_an_embedded_cluster(data_dir):
    cluster = Cluster(data_dir, brokers=2, broker_command=FAKE).start()
    pids = cluster.pids()
    assert stop_cluster(data_dir, timeout=BOUND) == [0, 1]
    deadline = time.monotonic() + BOUND
    while cluster.pids() and time.monotonic() < deadline:  # they exit; this process reaps
        time.sleep(0.01)
    assert cluster.pids() == {}
    assert list_objects(cluster.cluster_id) == []
    assert read_record(data_dir)["state"] == "stopped"
    cluster.stop()
    assert not any(running(p) for p in pids.values())


# -- ringlog cluster ----------------------------------------------------------------------------

@pytest.mark.multiprocess
def test_cli_detached_start_status_stop(data_dir):
    fake = " ".join(FAKE)
    started = cli("start", "--data-dir", str(data_dir), "--brokers", "2", "--detach",
                  "--broker-command", fake, "--override", "num.partitions=4")
    assert started.returncode == 0, started.stderr
    cluster_id = dd.read_cluster_id(data_dir)
    assert f"cluster id: {cluster_id}" in started.stdout
    record = read_record(data_dir)
    assert record["supervisor"] == "detached" and running(record["supervisor_pid"])
    for broker_id, pid in record["pids"].items():
        assert f"broker {broker_id}: pid {pid}" in started.stdout

    again = cli("start", "--data-dir", str(data_dir), "--detach", "--broker-command", fake)
    assert again.returncode == 1 and "already running" in again.stderr

    status = cli("status", "--data-dir", str(data_dir))
    assert status.returncode == 0, status.stdout
    assert "controller: broker" in status.stdout
    assert {b: r[:2] for b, r in status_rows(data_dir)[1].items()} == {
        int(b): (str(p), "serving") for b, p in record["pids"].items()}

    stopped = cli("stop", "--data-dir", str(data_dir))
    assert stopped.returncode == 0
    assert f"stopped brokers [0, 1] of cluster {cluster_id}" in stopped.stdout
    assert not running(record["supervisor_pid"])
    assert not any(running(p) for p in record["pids"].values())
    assert list_objects(cluster_id) == []

    code, rows = status_rows(data_dir)
    assert code == 3 and rows[0][1] == "stopped (exit code 0)"
    assert "no broker was running" in cli("stop", "--data-dir", str(data_dir)).stdout


@pytest.mark.multiprocess
def test_cli_foreground_start_stops_on_sigterm(data_dir):
    process = subprocess.Popen(
        [sys.executable, "-c", CLI, "start", "--data-dir", str(data_dir), "--brokers", "1",
         "--broker-command", " ".join(FAKE)], stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in process.stdout:
            lines.append(line)
            if "running in the foreground" in line:
                break
        assert "brokers: 1\n" in lines, lines
        broker = read_record(data_dir)["pids"]["0"]
        assert running(broker)
        process.send_signal(signal.SIGTERM)
        assert process.wait(BOUND) == 0
        cluster_id = dd.read_cluster_id(data_dir)
        assert process.stdout.read().splitlines()[-1] == (
            f"stopped cluster {cluster_id} in {data_dir} on a signal; its data is kept; start "
            f"it again with: ringlog cluster start --data-dir {data_dir}")
        assert not running(broker)
        assert list_objects(cluster_id) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(BOUND)
        process.stdout.close()


@pytest.mark.multiprocess
def test_cli_refuses_bad_config_and_reports_no_cluster(data_dir, tmp_path):
    bad = cli("start", "--data-dir", str(data_dir), "--override", "num.partitions=zero")
    assert bad.returncode == 2 and "num.partitions" in bad.stderr
    props = tmp_path / "server.properties"
    props.write_text("log.segment.bytes=1\n")
    bad = cli("start", "--data-dir", str(data_dir), "--config", str(props))
    assert bad.returncode == 2 and "log.segment.bytes" in bad.stderr
    bad = cli("start", "--data-dir", str(data_dir), "--override", "broker.id=2")
    assert bad.returncode == 2 and "broker.id" in bad.stderr
    status = cli("status", "--data-dir", str(data_dir))
    assert status.returncode == 1 and "no cluster in" in status.stdout
    assert read_record(data_dir) == {}


@pytest.mark.multiprocess
def test_cli_start_with_kafkas_server_properties(data_dir, tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("broker.id=0\nnum.partitions=3\nzookeeper.connect=localhost:2181\n")
    started = cli("start", "--data-dir", str(data_dir), "--brokers", "1", "--detach",
                  "--config", str(props), "--override", "num.partitions=5",
                  "--broker-command", " ".join(FAKE))
    try:
        assert started.returncode == 0, started.stderr
        assert "ignoring broker.id=0 from" in started.stderr
        assert read_record(data_dir)["config"] == {
            "num.partitions": "5", "zookeeper.connect": "localhost:2181"}
    finally:
        assert cli("stop", "--data-dir", str(data_dir)).returncode == 0


@pytest.mark.multiprocess
def test_cli_stop_after_the_detached_supervisor_died_stops_its_orphans(data_dir):
    started = cli("start", "--data-dir", str(data_dir), "--brokers", "2", "--detach",
                  "--broker-command", " ".join(FAKE))
    assert started.returncode == 0, started.stderr
    record = read_record(data_dir)
    os.kill(record["supervisor_pid"], signal.SIGKILL)  # the brokers keep running, orphaned
    brokers = list(record["pids"].values())
    assert all(running(p) for p in brokers)
    stopped = cli("stop", "--data-dir", str(data_dir))
    assert "stopped brokers [0, 1]" in stopped.stdout
    deadline = time.monotonic() + BOUND
    while any(running(p) for p in brokers) and time.monotonic() < deadline:
        time.sleep(0.01)  # reaped by init, not by us
    assert not any(running(p) for p in brokers)
    assert list_objects(dd.read_cluster_id(data_dir)) == []


# -- one supervisor per data directory; a data directory that is a file ------------------------

def in_use_line(data_dir, pid):
    """The start of the one line a start that lost the supervisor lock prints."""
    return (f"a cluster supervisor is already running on {data_dir}: {data_dir}/supervisor.lock "
            f"is held by pid {pid} (command ")


@pytest.mark.multiprocess
def test_a_start_with_another_count_on_a_running_directory_says_who_as_a_lock_loser_does(
        data_dir):
    # brokers_to_start meets the held lock before the start's own lock_or_explain would: the
    # line is the same either way (two starts at once take either path)
    with Cluster(data_dir, brokers=2, broker_command=FAKE):
        for extra in ([], ["--detach"]):
            done = cli("start", "--data-dir", str(data_dir), "--brokers", "1", *extra,
                       "--broker-command", " ".join(FAKE))
            assert (done.returncode, done.stdout) == (1, ""), extra
            assert done.stderr.startswith(in_use_line(data_dir, os.getpid())), done.stderr
            assert done.stderr.count("\n") == 1


@pytest.mark.multiprocess
def test_two_detached_starts_at_once_one_serves_the_other_says_who(data_dir):
    argv = [sys.executable, "-c", CLI, "start", "--data-dir", str(data_dir), "--brokers", "2",
            "--detach", "--broker-command", " ".join(FAKE)]
    starts = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    try:
        outputs = [p.communicate(timeout=BOUND) for p in starts]
        results = [(p.returncode, out, err) for p, (out, err) in zip(starts, outputs)]
        assert sorted(code for code, _, _ in results) == [0, 1], results
        (_, _, lost), = [r for r in results if r[0] == 1]
        record = read_record(data_dir)
        assert record["state"] == "serving" and running(record["supervisor_pid"])
        assert lost.startswith(in_use_line(data_dir, record["supervisor_pid"])), lost
        assert lost.count("\n") == 1 and "Traceback" not in lost
        assert all(running(p) for p in record["pids"].values())
        assert cli("status", "--data-dir", str(data_dir)).returncode == 0
        log_text = (data_dir / dd.SUPERVISOR_LOG).read_text()
        assert "already running" not in log_text  # the loser wrote nothing there
    finally:
        for process in starts:
            if process.poll() is None:
                process.kill()
                process.wait(BOUND)
        assert cli("stop", "--data-dir", str(data_dir)).returncode == 0


@pytest.mark.multiprocess
def test_two_foreground_starts_at_once_one_serves_the_other_says_who(data_dir):
    argv = [sys.executable, "-c", CLI, "start", "--data-dir", str(data_dir), "--brokers", "2",
            "--broker-command", " ".join(FAKE)]
    starts = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    try:
        deadline = time.monotonic() + BOUND
        while all(p.poll() is None for p in starts):
            assert time.monotonic() < deadline, "neither start gave up"
            time.sleep(0.01)
        loser, = [p for p in starts if p.poll() is not None]
        winner, = [p for p in starts if p is not loser]
        out, lost = loser.communicate()
        assert loser.returncode == 1 and out == "", (out, lost)
        assert lost.startswith(in_use_line(data_dir, winner.pid)), lost
        assert lost.count("\n") == 1
        for line in winner.stdout:
            if "running in the foreground" in line:
                break
        assert winner.poll() is None
        brokers = read_record(data_dir)["pids"]
        assert sorted(brokers) == ["0", "1"] and all(running(p) for p in brokers.values())
        winner.send_signal(signal.SIGTERM)
        assert winner.wait(BOUND) == 0
    finally:  # a failed assertion still stops the winner with SIGTERM: it unlinks its names
        for process in starts:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(BOUND)
                except subprocess.TimeoutExpired:
                    process.kill()
            process.communicate(timeout=BOUND)


@pytest.mark.multiprocess
def test_a_data_directory_that_is_a_file_is_one_line_everywhere(tmp_path):
    path = tmp_path / "file"
    path.write_text("not a directory")
    message = (f"[Error 56] data directory {path} is not a directory (it is a regular file); "
               f"give a directory, or a path that does not exist yet")
    line = f"KafkaStorageError: {message}\n"
    for args, code in ((["start"], 1), (["start", "--detach"], 1), (["stop"], 1),
                       (["status"], 4)):
        done = cli(*args, "--data-dir", str(path), "--broker-command", " ".join(FAKE)) \
            if args[0] == "start" else cli(*args, "--data-dir", str(path))
        assert (done.returncode, done.stderr, done.stdout) == (code, line, ""), args
    with pytest.raises(KafkaStorageError) as failure:
        Cluster(path, broker_command=FAKE)
    assert str(failure.value) == message
    assert path.read_text() == "not a directory"


@pytest.mark.multiprocess
def test_a_detached_supervisor_that_cannot_open_its_log_says_so_and_lets_go(data_dir):
    data_dir.mkdir(mode=0o700)
    (data_dir / dd.SUPERVISOR_LOG).mkdir()
    done = cli("start", "--data-dir", str(data_dir), "--detach", "--broker-command",
               " ".join(FAKE))
    assert done.returncode == 1
    assert done.stderr == (f"cannot open the supervisor log: [Errno 21] Is a directory: "
                           f"'{data_dir}/supervisor.log'\n")
    assert read_record(data_dir) == {}
    (data_dir / dd.SUPERVISOR_LOG).rmdir()
    with Cluster(data_dir, brokers=1, broker_command=FAKE):  # the lock was let go
        pass


@pytest.mark.multiprocess
def test_everything_in_the_data_directory_is_private_after_records_were_written(data_dir):
    from cluster import KafkaProducer

    old = os.umask(0o022)  # a user's usual umask: would make 0755 / 0644
    try:
        with Cluster(data_dir, brokers=2, num_partitions=2) as cluster:
            assert current_umask() == 0o022  # the embedding program's umask is its own
            with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                               linger_ms=0) as producer:
                for n in range(20):
                    producer.send("modes", f"record {n}".encode()).get(BOUND)
            cluster.kill_broker(1)
            cluster.start_broker(1)
        assert current_umask() == 0o022
    finally:
        os.umask(old)
    seen = {"dirs": 0, "files": 0}
    for root, _, files in os.walk(data_dir):
        assert stat.S_IMODE(os.stat(root).st_mode) == 0o700, root
        seen["dirs"] += 1
        for name in files:
            path = os.path.join(root, name)
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
            seen["files"] += 1
    segments = [f for _, _, files in os.walk(data_dir) for f in files if f.endswith(".log")
                and f[0].isdigit()]
    assert segments and seen["dirs"] >= 6, seen  # D, 2 brokers, the metadata log, partitions


def current_umask():
    old = os.umask(0)
    os.umask(old)
    return old


# -- one broker at a time: cluster start on a partly running cluster, ringlog broker ---------

BROKER_CLI = CLI.replace("cluster_cmd", "broker_cmd").replace("ringlog cluster", "ringlog broker")


def broker_cli(*args, timeout=BOUND):
    return subprocess.run([sys.executable, "-c", BROKER_CLI, *args], capture_output=True,
                          text=True, timeout=timeout)


def start_detached(data_dir, brokers, *extra, broker_command=FAKE):
    started = cli("start", "--data-dir", str(data_dir), "--brokers", str(brokers), "--detach",
                  "--broker-command", " ".join(broker_command), *extra)
    assert started.returncode == 0, started.stderr
    return read_record(data_dir)


def wait_gone(pid):
    deadline = time.monotonic() + BOUND
    while running(pid):
        assert time.monotonic() < deadline, f"pid {pid} still runs after {BOUND} s"
        time.sleep(0.01)


def status_until(data_dir, broker_id, state):
    """``status_rows`` once broker ``broker_id``'s state reads ``state`` (the supervisor
    notices an exit at its next look, a moment after the process is gone)."""
    deadline = time.monotonic() + BOUND
    while True:
        code, rows = status_rows(data_dir)
        if rows[broker_id][1] == state or time.monotonic() > deadline:
            return code, rows
        time.sleep(0.05)


def status_rows(data_dir):
    """``cluster status``'s exit code and broker table: {id: (pid, state, since, controller)}."""
    done = cli("status", "--data-dir", str(data_dir))
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("BROKER"))
    assert lines[header].split() == ["BROKER", "PID", "STATE", "SINCE", "CONTROLLER"]
    rows = {}
    for line in lines[header + 1:]:
        if line.startswith("controller:"):
            break
        broker, pid, state, since, controller = re.split(r"\s{2,}", line)  # cells: 1 space
        rows[int(broker)] = (pid, state, since, controller)
    return done.returncode, rows


def produce_and_consume_everywhere(data_dir, topic, partitions):
    """One record per partition through the public API, each read back: every partition
    serves."""
    from cluster import KafkaConsumer, KafkaProducer, TopicPartition

    with KafkaProducer(bootstrap_servers=str(data_dir), linger_ms=0,
                       max_block_ms=BOUND * 1000) as producer:
        offsets = {p: producer.send(topic, f"to {p}".encode(), partition=p).get(BOUND).offset
                   for p in range(partitions)}
    got = {}
    with KafkaConsumer(bootstrap_servers=str(data_dir), auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + BOUND
        while len(got) < partitions and time.monotonic() < deadline:
            for tp, records in c.poll(timeout_ms=200).items():
                for r in records:
                    if r.offset == offsets[tp.partition]:
                        got[tp.partition] = r.value
    assert got == {p: f"to {p}".encode() for p in range(partitions)}


@pytest.mark.multiprocess
def test_cluster_start_brings_back_a_killed_broker_and_every_partition_serves(data_dir):
    from cluster import KafkaAdminClient, NewTopic

    record = start_detached(data_dir, 3, broker_command=BROKER_COMMAND)
    try:
        with KafkaAdminClient(bootstrap_servers=str(data_dir)) as admin:
            admin.create_topics([NewTopic("spread", num_partitions=6, replication_factor=1)])
        produce_and_consume_everywhere(data_dir, "spread", 6)
        victim = record["pids"]["1"]
        os.kill(victim, signal.SIGKILL)
        wait_gone(victim)
        code, rows = status_until(data_dir, 1, "crashed (killed by SIGKILL)")
        assert code == 3 and rows[1][1] == "crashed (killed by SIGKILL)", rows

        started = cli("start", "--data-dir", str(data_dir), "--brokers", "3", "--detach")
        assert started.returncode == 0, started.stderr
        again = read_record(data_dir)
        assert started.stdout.splitlines() == [
            f"started broker 1 (pid {again['pids']['1']}) of cluster {again['cluster_id']} in "
            f"{data_dir}"]
        assert again["supervisor_pid"] == record["supervisor_pid"]
        assert {b: p for b, p in again["pids"].items() if b != "1"} == {
            b: p for b, p in record["pids"].items() if b != "1"}
        deadline = time.monotonic() + BOUND
        while cluster_status(data_dir)["offline"]:
            assert time.monotonic() < deadline, cluster_status(data_dir)
            time.sleep(0.05)
        produce_and_consume_everywhere(data_dir, "spread", 6)
        assert status_rows(data_dir)[0] == 0
    finally:
        assert cli("stop", "--data-dir", str(data_dir)).returncode == 0


@pytest.mark.multiprocess
def test_broker_stop_start_kill_round_trip(data_dir):
    # restart-on-failure on: a deliberate stop or kill must still not be restarted
    record = start_detached(data_dir, 2, "--restart-on-failure")
    d = str(data_dir)
    try:
        old = record["pids"]["1"]
        stopped = broker_cli("stop", "--data-dir", d, "--id", "1")
        assert (stopped.returncode, stopped.stdout) == (0, f"stopped broker 1 (pid {old}) of "
                                                           f"{d}\n"), stopped.stderr
        assert not running(old)
        again = broker_cli("stop", "--data-dir", d, "--id", "1")
        assert again.returncode == 1 and again.stderr == (
            f"BrokerNotAvailableError: [Error 8] broker 1 of {d} is not running (its lock "
            f"{d}/broker-1/broker.lock is free); `ringlog broker start --data-dir {d} --id 1` "
            f"starts it\n")
        time.sleep(1.5)  # past the first restart backoff: nothing restarts it
        assert "1" not in read_record(data_dir)["pids"]
        stopped = "stopped (exit code 0)"
        assert status_until(data_dir, 1, stopped)[1][1][:2] == (str(old), stopped)

        started = broker_cli("start", "--data-dir", d, "--id", "1")
        assert started.returncode == 0, started.stderr
        new = read_record(data_dir)["pids"]["1"]
        assert new != old and started.stdout == f"started broker 1 (pid {new}) of {d}\n"
        assert dd.read_broker_state(data_dir, 1) == {"pid": new, "state": "serving"}
        twice = broker_cli("start", "--data-dir", d, "--id", "1")
        assert twice.returncode == 1 and f"broker 1 of {d} is already running (pid {new}); " \
            f"`ringlog broker stop --data-dir {d} --id 1` stops it" in twice.stderr

        killed = broker_cli("kill", "--data-dir", d, "--id", "1")
        assert killed.stdout == f"killed broker 1 (pid {new}) of {d}\n", killed.stderr
        assert not running(new)
        time.sleep(1.5)
        assert "1" not in read_record(data_dir)["pids"]
        killed = "stopped (killed by SIGKILL)"
        assert status_until(data_dir, 1, killed)[1][1][:2] == (str(new), killed)
        assert broker_cli("start", "--data-dir", d, "--id", "1").returncode == 0
        assert status_rows(data_dir)[0] == 0
        assert not (data_dir / "broker-1" / "supervisor.request").exists()
    finally:
        assert cli("stop", "--data-dir", d).returncode == 0


@pytest.mark.multiprocess
def test_status_has_one_row_per_broker(data_dir):
    record = start_detached(data_dir, 3)
    try:
        code, rows = status_rows(data_dir)
        controller = cluster_status(data_dir)["controller_id"]
        assert code == 0 and sorted(rows) == [0, 1, 2]
        for broker_id, (pid, state, since, is_controller) in rows.items():
            assert pid == str(record["pids"][str(broker_id)]) and state == "serving"
            assert time.strptime(since, "%Y-%m-%d %H:%M:%S")
            assert is_controller == ("yes" if broker_id == controller else "-")
        victim = 2 if controller != 2 else 1
        os.kill(record["pids"][str(victim)], signal.SIGKILL)
        wait_gone(record["pids"][str(victim)])
        deadline = time.monotonic() + BOUND
        while status_rows(data_dir)[1][victim][1] != "crashed (killed by SIGKILL)":
            assert time.monotonic() < deadline, status_rows(data_dir)
            time.sleep(0.05)
        code, rows = status_rows(data_dir)
        assert code == 3 and rows[victim][0] == str(record["pids"][str(victim)])
        assert time.strptime(rows[victim][2], "%Y-%m-%d %H:%M:%S")
    finally:
        assert cli("stop", "--data-dir", str(data_dir)).returncode == 0
    code, rows = status_rows(data_dir)  # a crash stays one after the cluster stopped
    assert code == 3 and {b: r[1] for b, r in rows.items()} == {
        **{b: "stopped (exit code 0)" for b in rows}, victim: "crashed (killed by SIGKILL)"}


@pytest.mark.multiprocess
def test_restart_on_failure_brings_a_killed_broker_back(data_dir):
    record = start_detached(data_dir, 2, "--restart-on-failure")
    try:
        old = record["pids"]["0"]
        os.kill(old, signal.SIGKILL)
        deadline = time.monotonic() + BOUND
        while True:
            pid = read_record(data_dir)["pids"].get("0")
            if pid not in (None, old) and dd.read_broker_state(data_dir, 0) == {
                    "pid": pid, "state": "serving"}:
                break
            assert time.monotonic() < deadline, read_record(data_dir)
            time.sleep(0.05)
        log_text = (data_dir / dd.SUPERVISOR_LOG).read_text()
        assert f"broker 0 (pid {old}) crashed (killed by SIGKILL); restarting it in 1 s" \
            in log_text
        assert "restarting broker 0 (restart 1)" in log_text
        assert status_rows(data_dir)[0] == 0
        os.kill(pid, signal.SIGTERM)  # from anywhere: a clean exit (code 0) is no failure
        wait_gone(pid)
        time.sleep(1.5)  # past the first backoff
        assert "0" not in read_record(data_dir)["pids"]
        assert status_rows(data_dir)[1][0][:2] == (str(pid), "stopped (exit code 0)")
    finally:
        assert cli("stop", "--data-dir", str(data_dir)).returncode == 0


@pytest.mark.multiprocess
def test_a_crashed_broker_is_restarted_after_its_backoff(data_dir):
    clock = FakeClock(100.0)
    supervisor = Supervisor(data_dir, [0], broker_command=FAKE, restart_on_failure=True,
                            clock=clock)
    supervisor.start()
    try:
        for delay in (1.0, 2.0):
            old = supervisor.pids()[0]
            os.kill(old, signal.SIGKILL)
            wait_gone(old)
            while supervisor.pids():  # reaped once it is a zombie
                time.sleep(0.01)
            supervisor.watch()
            assert read_record(data_dir)["broker_states"]["0"]["state"] == "crashed"
            clock.advance(delay - 0.1)
            supervisor.watch()
            assert supervisor.pids() == {}  # not yet
            clock.advance(0.1)
            supervisor.watch()
            assert list(supervisor.pids()) == [0] and supervisor.pids()[0] != old
    finally:
        supervisor.stop()


def test_restart_backoff_doubles_to_a_minute_and_resets_after_a_good_run():
    backoff = RestartBackoff()
    delays = [backoff.crashed(started_at=t, now=t + 1.0) for t in range(9)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert backoff.crashed(started_at=0.0, now=60.0) == 1.0  # it ran a minute: forgiven
    assert backoff.crashed(started_at=60.0, now=61.0) == 2.0


@pytest.mark.multiprocess
def test_broker_start_without_a_watching_supervisor_says_what_to_run(data_dir):
    d = str(data_dir)
    with Cluster(data_dir, brokers=2, broker_command=FAKE) as cluster:
        cluster.kill_broker(1)
        embedded = broker_cli("start", "--data-dir", d, "--id", "1")
        assert embedded.returncode == 1 and embedded.stderr == (
            f"BrokerNotAvailableError: [Error 8] cannot start brokers [1] of {d}: its "
            f"supervisor is embedded in a Python program (pid {os.getpid()}), which starts "
            f"its brokers itself (Cluster.start_broker)\n")
    done = broker_cli("start", "--data-dir", d, "--id", "1")
    assert done.returncode == 1 and done.stderr == (
        f"BrokerNotAvailableError: [Error 8] cannot start brokers [1] of {d}: no supervisor "
        f"runs there (a broker needs one); `ringlog cluster start --data-dir {d} --brokers 2 "
        f"--detach` starts the cluster\n")
    assert not (data_dir / "broker-1" / "supervisor.request").exists()


@pytest.mark.multiprocess
def test_broker_stop_of_a_broker_that_ignores_sigterm_says_to_kill_it(data_dir):
    d = str(data_dir)
    with Cluster(data_dir, brokers=1, broker_command=FAKE + ["--ignore-sigterm"],
                 stop_timeout=1.0) as cluster:
        pid = cluster.pids()[0]
        stuck = broker_cli("stop", "--data-dir", d, "--id", "0", "--timeout", "0.5")
        assert stuck.returncode == 1 and stuck.stderr == (
            f"BrokerNotAvailableError: [Error 8] broker 0 (pid {pid}) of {d} did not stop "
            f"within 0.5 s of SIGTERM; `ringlog broker kill --data-dir {d} --id 0` kills it\n")
        assert running(pid)
        killed = broker_cli("kill", "--data-dir", d, "--id", "0")
        assert killed.stdout == f"killed broker 0 (pid {pid}) of {d}\n", killed.stderr
        assert not running(pid)


@pytest.mark.multiprocess
def test_cluster_start_dev_profile_under_the_overrides(data_dir):
    """``cluster start --dev`` hands every broker the dev profile (no fsync, 1 MiB
    segments), an ``--override`` of the same key winning."""
    started = cli("start", "--data-dir", str(data_dir), "--brokers", "1", "--detach", "--dev",
                  "--override", "log.segment.bytes=2097152",
                  "--broker-command", " ".join(FAKE))
    try:
        assert started.returncode == 0, started.stderr
        argv = " ".join(psutil.Process(read_record(data_dir)["pids"]["0"]).cmdline())
        assert "--override ringlog.fsync=false" in argv
        assert "--override offsets.topic.segment.bytes=1048576" in argv
        assert "--override log.segment.bytes=2097152" in argv
        assert "--override log.segment.bytes=1048576" not in argv
    finally:
        assert cli("stop", "--data-dir", str(data_dir)).returncode == 0
