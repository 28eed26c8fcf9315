"""``top``, ``metrics`` and ``profile`` on a running 2-broker cluster with a producer and a
consumer process: every broker and client is listed with its memory and GC, the HTTP
scrape carries Kafka's families, and profile samples while a command runs. The cluster
stops at the end of the module and leaves nothing in /dev/shm (``tool_cluster``)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster.producer.kafka_producer import KafkaProducer
from cluster.stats.reader import read_all
from cluster.tools.observe import profile, report, top
from consumer_proc.consumer import KafkaConsumer
from tests.support.bounds import BOUND
from tests.support.paths import ROOT
from tests.support.processes import CTX
from tests.support.tools import run_tool, tool_cluster
from tests.support.topics import create_topic

pytestmark = pytest.mark.multiprocess
cluster = tool_cluster(2)
TOPIC = "observed"
RECORDS = 300


def producing(bootstrap, commands, answers):
    """Send RECORDS records, then keep 300,000 dicts on "allocate"; return on "exit"."""
    kept = []
    with KafkaProducer(bootstrap_servers=bootstrap, client_id="top-producer",
                       linger_ms=1) as producer:
        for i in range(RECORDS):
            producer.send(TOPIC, b"value-%d" % i)
        producer.flush(BOUND)
        answers.put("ready")
        while True:
            command = commands.get(timeout=BOUND)
            if command == "allocate":
                kept.extend([{"n": n} for n in range(1000)] for _ in range(300))
                answers.put("allocated")
            elif command == "exit":
                break
    answers.put("closed")


def consuming(bootstrap, done):
    with KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, client_id="top-consumer",
                       auto_offset_reset="earliest", fetch_max_wait_ms=50) as consumer:
        seen, deadline = 0, time.monotonic() + BOUND
        while seen < RECORDS and time.monotonic() < deadline:
            seen += sum(len(r) for r in consumer.poll(100).values())
        done.wait(BOUND)


@pytest.fixture(scope="module")
def clients(cluster):
    """The producer and consumer processes, publishing, with RECORDS records through the
    topic; stopped (closing their clients, so their pages go) at the end of the module."""
    create_topic(cluster, TOPIC, 2)
    commands, answers, done = CTX.Queue(), CTX.Queue(), CTX.Event()
    producer = CTX.Process(target=producing, args=(cluster.bootstrap_servers, commands,
                                                   answers), daemon=True)
    consumer = CTX.Process(target=consuming, args=(cluster.bootstrap_servers, done),
                           daemon=True)
    producer.start()
    consumer.start()
    try:
        assert answers.get(timeout=BOUND) == "ready"
        wait_for(cluster.cluster_id, lambda roles: roles.get("consumer", {}).get(
            "records-consumed-total") == RECORDS and "producer" in roles)
        yield producer, consumer, commands, answers
    finally:
        commands.put("exit")
        done.set()
        for process in (producer, consumer):
            process.join(BOUND)
            if process.is_alive():
                process.kill()
                process.join(BOUND)
    assert [s.role for s in read_all(cluster.cluster_id)] == ["broker", "broker"]


def wait_for(cluster_id, condition):
    """Poll the pages until ``condition({role: counters})`` holds (bounded)."""
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        roles = {s.role: s.counters for s in read_all(cluster_id)}
        if condition(roles):
            return
        time.sleep(0.1)
    raise AssertionError(f"pages of {cluster_id}: {read_all(cluster_id)}")


def top_json(capsys, data_dir):
    assert run_tool(top, "--data-dir", data_dir, "--once", "--json", "--interval", "1") == 0
    return json.loads(capsys.readouterr().out)["processes"]


def test_top_lists_every_broker_and_client_and_sees_an_allocation(capsys, cluster, clients):
    producer, consumer, commands, answers = clients
    shown = top_json(capsys, cluster.data_dir)
    by_name = {p["name"]: p for p in shown}
    assert set(by_name) == {"broker-0", "broker-1", "top-producer", "top-consumer"}
    assert {p["pid"] for p in shown} == set(cluster.pids().values()) | {producer.pid,
                                                                       consumer.pid}
    for process in shown:
        assert process["state"] == "alive" and process["rss"] > 0
        assert len(process["gc_collections"]) == 3 and process["cpu_percent"] is not None
        assert process["gc_pause_max"] >= 0.0
    assert by_name["top-producer"]["records_out"] == RECORDS
    assert by_name["top-consumer"]["records_in"] == RECORDS
    assert sum(by_name[b]["records_in"] for b in ("broker-0", "broker-1")) == RECORDS
    before = by_name["top-producer"]
    commands.put("allocate")
    assert answers.get(timeout=BOUND) == "allocated"
    allocated = time.time()
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline and not any(
            s.pid == producer.pid and s.updated > allocated for s in read_all(cluster.cluster_id)):
        time.sleep(0.1)
    after = {p["name"]: p for p in top_json(capsys, cluster.data_dir)}["top-producer"]
    assert after["rss"] - before["rss"] > 10 << 20
    assert after["gc_collections"][0] > before["gc_collections"][0]


def test_the_http_scrape_carries_kafka_families(cluster, clients):
    command = [sys.executable, "-m", "cluster.tools.cli", "metrics", "--data-dir",
               str(cluster.data_dir), "--prometheus-port", "0"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = server.stdout.readline()
        assert "/metrics" in line, line
        url = line.split(" at ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=BOUND) as answer:
            text = answer.read().decode()
    finally:
        server.terminate()
        server.wait(BOUND)
    assert server.returncode == 0
    found = {f.name: f for f in text_string_to_metric_families(text)}
    brokers = {s.labels["broker_id"] for s in
               found["kafka_server_brokertopicmetrics_messagesin"].samples}
    assert brokers == {"0", "1"}
    appended = sum(s.value for s in found["kafka_server_brokertopicmetrics_messagesin"].samples)
    assert appended == RECORDS
    for family in ("kafka_server_brokertopicmetrics_bytesin",
                   "kafka_server_brokertopicmetrics_bytesout",
                   "kafka_network_requestmetrics_requests",
                   "kafka_network_requestmetrics_totaltimems",
                   "kafka_server_replicamanager_underreplicatedpartitions",
                   "kafka_server_replicamanager_partitioncount",
                   "kafka_server_replicamanager_leadercount",
                   "kafka_controller_kafkacontroller_offlinepartitionscount",
                   "kafka_producer_producer_metrics_buffer_available_bytes",
                   "kafka_producer_producer_metrics_request_latency_avg",
                   "kafka_consumer_consumer_fetch_manager_metrics_records_lag_max",
                   "ringlog_process_resident_memory_bytes", "ringlog_gc_collections",
                   "ringlog_gc_pause_seconds", "ringlog_process_cpu_seconds",
                   "ringlog_process_context_switches"):
        assert found[family].samples, family
    sent = found["kafka_producer_producer_metrics_record_send"].samples
    assert [(s.labels["client_id"], s.value) for s in sent] == [("top-producer", RECORDS)]
    consumed = found["kafka_consumer_consumer_fetch_manager_metrics_records_consumed"].samples
    assert [(s.labels["client_id"], s.value) for s in consumed] == [("top-consumer", RECORDS)]


SENDER = f"""
from cluster import KafkaProducer
with KafkaProducer(bootstrap_servers={{data!r}}, client_id="profiled") as producer:
    for i in range(2000):
        producer.send({TOPIC!r}, b"x" * 100)
    producer.flush(30)
    import time; time.sleep(1.5)
"""


def test_profile_samples_while_a_command_runs(capsys, cluster, tmp_path):
    out = tmp_path / "profile"
    status = run_tool(profile, "--data-dir", cluster.data_dir, "--out", out, "--interval",
                      "200ms", "--", sys.executable, "-c",
                      SENDER.format(data=str(cluster.data_dir)))
    assert status == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        (report.SAMPLES_JSON, report.SUMMARY_TXT) + report.PNGS)
    samples = json.loads((out / report.SAMPLES_JSON).read_text())["samples"]
    names = {p["name"] for s in samples for p in s["processes"]}
    assert {"broker-0", "broker-1", "profiled"} <= names
    summary = (out / report.SUMMARY_TXT).read_text()
    assert "broker" in summary and "producer" in summary
