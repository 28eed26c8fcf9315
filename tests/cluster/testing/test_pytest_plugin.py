"""The pytest plugin (cluster/testing/pytest_plugin.py) run as a user's suite runs it:
inner suites under ``pytester`` loading the plugin with ``-p``, each in a subprocess (the
clusters are OS processes; a subprocess keeps their signals and atexit hooks away from this
run). Checked: the fixtures and their clusters (both clients' addresses, new_topic), a
failing test's report section, pytest-xdist workers, an interrupted run leaving no process
and no shared-memory object. Few cluster starts in all: each inner suite shares clusters."""
from __future__ import annotations

import configparser
import importlib
import importlib.metadata
import json
import os

import psutil
import pytest

from cluster.supervisor.supervisor import stop_cluster
from shm_ring.naming import list_objects
from tests.support.bounds import BOUND
from tests.support.paths import ROOT


def starts_clusters(test):
    """The inner suites start clusters: a few seconds each."""
    return pytest.mark.multiprocess(pytest.mark.slow(test))

pytest_plugins = ["pytester"]

PLUGIN = "cluster.testing.pytest_plugin"
INNER_TIMEOUT = 300


def plugin_args():
    """``-p`` the plugin unless ringlog's install registers it (``-p`` then would register
    the module twice: pluggy refuses)."""
    installed = any(ep.name == "ringlog" and ep.value == PLUGIN
                    for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", PLUGIN]


def run(pytester, *args):
    pytester.syspathinsert()
    return pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", *args,
                                         timeout=INNER_TIMEOUT)


def test_registered_as_a_pytest_plugin():
    """setup.cfg's entry point names the module whose fixtures these tests run (an install
    of ringlog is what turns it into the ``pytest11`` entry point)."""
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    lines = parser["options.entry_points"]["pytest11"].strip().splitlines()
    assert [line.replace(" ", "") for line in lines] == [f"ringlog={PLUGIN}"]
    module = importlib.import_module(PLUGIN)
    assert callable(module.ringlog_cluster) and callable(module.ringlog_cluster_factory)


def recorded(pytester):
    """What the inner tests wrote to clusters.jsonl: data dir, cluster id, broker pids."""
    path = pytester.path / "clusters.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_nothing_left(clusters):
    for cluster in clusters:
        assert list_objects(cluster["cluster_id"]) == [], cluster
        for pid in cluster["pids"]:
            assert not psutil.pid_exists(pid) or \
                psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, cluster


RECORD = '''
import json, os

def record(cluster):
    c = cluster.cluster
    pids = list(c.pids().values())
    with open(os.path.join(os.environ["RECORD_DIR"], "clusters.jsonl"), "a") as f:
        f.write(json.dumps({"data_dir": cluster.data_dir, "cluster_id": c.cluster_id,
                            "pids": pids}) + "\\n")
'''


@pytest.fixture
def inner(pytester, monkeypatch):
    """The inner suite's directory; whatever clusters its tests recorded are stopped at
    the end (a plugin that failed to stop them must not leave them to the machine)."""
    monkeypatch.setenv("RECORD_DIR", str(pytester.path))
    pytester.makepyfile(recording=RECORD)
    yield pytester
    if (pytester.path / "clusters.jsonl").exists():
        for cluster in recorded(pytester):
            if os.path.isdir(cluster["data_dir"]):  # a tmpfs cluster's goes with its stop
                stop_cluster(cluster["data_dir"], timeout=BOUND)


@starts_clusters
def test_fixtures_clients_and_failure_report(inner):
    """Session cluster shared by two tests, a factory cluster of 2 brokers with a broker
    config override, records through ringlog's clients and kafka-python through the
    gateway; a failing test carries its cluster's broker logs (the dev profile's warning
    among them) and still cleans up."""
    inner.makepyfile(test_user='''
from cluster import KafkaConsumer, KafkaProducer
from recording import record

def roundtrip(bootstrap, topic):
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    producer.send(topic, b"v1").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=20000)
    values = [next(consumer).value]
    consumer.close()
    return values

def test_shared_a(ringlog_cluster):
    record(ringlog_cluster)
    t1, t2 = ringlog_cluster.new_topic(partitions=2), ringlog_cluster.new_topic()
    assert t1 != t2
    assert roundtrip(ringlog_cluster.bootstrap_servers, t1) == [b"v1"]

def test_shared_b_is_the_same_cluster_and_speaks_kafka(ringlog_cluster):
    from kafka import KafkaProducer as WireProducer
    record(ringlog_cluster)
    host, port = ringlog_cluster.kafka_bootstrap.split(",")[0].split(":")
    assert host == "127.0.0.1" and int(port) > 0
    topic = ringlog_cluster.new_topic()
    producer = WireProducer(bootstrap_servers=ringlog_cluster.kafka_bootstrap)
    producer.send(topic, b"v1").get(timeout=30)
    producer.close()
    assert roundtrip(ringlog_cluster.bootstrap_servers, topic) == [b"v1"]

def test_factory_fails_with_clients_left_open(ringlog_cluster_factory, tmp_path):
    cluster = ringlog_cluster_factory(brokers=2, replication_factor=2, num_partitions=3)
    record(cluster)
    assert cluster.data_dir.startswith(str(tmp_path))
    assert cluster.cluster.config["num.partitions"] == 3
    topic = cluster.new_topic(partitions=2)
    partitions = cluster.cluster.metadata().topics[topic].partitions
    assert [len(p.replicas) for p in partitions] == [2, 2]
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)  # left open
    producer.send(topic, b"x").get(timeout=30)
    consumer = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap_servers,
                             auto_offset_reset="earliest")  # left open
    consumer.poll(timeout_ms=1000)
    assert False, "the user's assertion"

def test_factory_on_tmpfs(ringlog_cluster_factory):
    cluster = ringlog_cluster_factory(tmpfs=True)
    record(cluster)
    assert cluster.data_dir.startswith("/dev/shm/rl-data-")
    assert roundtrip(cluster.bootstrap_servers, cluster.new_topic()) == [b"v1"]
''')
    result = run(inner, "-rA")
    result.assert_outcomes(passed=3, failed=1)
    text = result.stdout.str()
    assert "ringlog broker logs" in text and "--- broker 1" in text, text
    assert "ringlog.fsync=false" in text  # the dev profile reached the brokers
    clusters = recorded(inner)
    # the shared one, the factory's two (the second on tmpfs, removed with its stop)
    assert len({c["cluster_id"] for c in clusters}) == 3
    on_tmpfs = [c["data_dir"] for c in clusters if c["data_dir"].startswith("/dev/shm/")]
    assert len(on_tmpfs) == 1 and not os.path.exists(on_tmpfs[0])
    assert_nothing_left(clusters)


@starts_clusters
def test_xdist_workers_own_their_clusters(inner):
    """Two workers, each its own session cluster and gateway; nothing left after."""
    inner.makepyfile(test_workers='''
import os
from recording import record

def test_worker(ringlog_cluster):
    record(ringlog_cluster)
    worker = os.environ["PYTEST_XDIST_WORKER"]
    with open(os.path.join(os.environ["RECORD_DIR"], f"gw-{worker}"), "w") as f:
        f.write(ringlog_cluster.kafka_bootstrap)
    ringlog_cluster.new_topic()
''')
    result = run(inner, "-n", "2", "--dist", "each")  # the test runs on both workers
    result.assert_outcomes(passed=2)
    clusters = recorded(inner)
    assert len({c["cluster_id"] for c in clusters}) == 2
    assert len({c["data_dir"] for c in clusters}) == 2
    gateways = [(inner.path / f"gw-{w}").read_text() for w in ("gw0", "gw1")]
    assert gateways[0] != gateways[1]  # each worker's gateway on ports of its own
    assert_nothing_left(clusters)


@starts_clusters
@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_an_interrupted_test_leaves_nothing(inner, signum):
    inner.makepyfile(test_interrupted=f'''
import os, signal, time
from cluster import KafkaProducer
from recording import record

def test_interrupted(ringlog_cluster_factory):
    cluster = ringlog_cluster_factory()
    record(cluster)
    KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)  # left open
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:  # run from a background job
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as in a terminal
    os.kill(os.getpid(), signal.{signum})
    time.sleep(60)
''')
    result = run(inner)
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    clusters = recorded(inner)
    assert len(clusters) == 1
    assert_nothing_left(clusters)
