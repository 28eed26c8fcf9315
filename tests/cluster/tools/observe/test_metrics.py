"""``ringlog metrics``: the pages as Prometheus families under Kafka's JMX names, parsed
back with prometheus-client's own parser."""
from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster.tools.observe import metrics
from tests.support.snapshots import generation, latency, snapshot
from tests.support.tools import run_tool

BROKER = snapshot(pid=11, counters={"records-in-total": 1200.0, "bytes-in-total": 120000.0,
                                    "bytes-out-total": 240000.0, "partition-count": 6.0,
                                    "replication-bytes-out-total": 5.0,
                                    "leader-count": 2.0, "under-replicated-partitions": 1.0,
                                    "offline-partitions": 0.0, "request-total:Produce": 3.0,
                                    "request-total:Fetch": 1.0,
                                    "ring-occupancy-bytes": 4096.0},
                  histograms={"request-latency-ms:Produce": latency([0.5, 2.0, 7.0]),
                              "request-latency-ms:Fetch": latency([60.0])},
                  gc=(generation(5, [0.00002] * 5, collected=40), generation(1, [0.002]),
                      generation(0)))
PRODUCER = snapshot(role="producer", name="producer-1", pid=12,
                    counters={"record-send-total": 1000.0, "outgoing-byte-total": 100000.0,
                              "buffer-available-bytes": 33554432.0,
                              "bufferpool-waiters": 1.0},
                    histograms={"request-latency-ms:Produce": latency([2.0, 4.0])})
CONSUMER = snapshot(role="consumer", name="consumer-1", pid=13, alive=False,
                    counters={"records-consumed-total": 900.0, "records-lag-max": 100.0},
                    histograms={"fetch-latency-ms": latency([3.0, 5.0])})


def scrape(capsys, cluster_dir, fake_pages, processes):
    fake_pages.reads = [processes]
    assert run_tool(metrics, "--data-dir", cluster_dir, "--once") == 0
    text = capsys.readouterr().out
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(family, suffix=""):
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples
            if s.name == family.name + suffix}


def test_broker_figures_carry_kafka_names(capsys, cluster_dir, fake_pages):
    found = scrape(capsys, cluster_dir, fake_pages, [BROKER])
    ids = (("broker_id", "0"), ("pid", "11"))
    assert found["kafka_server_brokertopicmetrics_messagesin"].type == "counter"
    assert samples(found["kafka_server_brokertopicmetrics_messagesin"], "_total") == {
        ids: 1200.0}
    assert samples(found["kafka_server_brokertopicmetrics_bytesin"], "_total") == {ids: 120000.0}
    assert samples(found["kafka_server_brokertopicmetrics_bytesout"], "_total") == {ids: 240000.0}
    assert samples(found["kafka_server_brokertopicmetrics_replicationbytesout"], "_total") == {
        ids: 5.0}
    assert samples(found["kafka_server_replicamanager_partitioncount"]) == {ids: 6.0}
    assert samples(found["kafka_server_replicamanager_leadercount"]) == {ids: 2.0}
    assert samples(found["kafka_server_replicamanager_underreplicatedpartitions"]) == {ids: 1.0}
    assert samples(found["kafka_controller_kafkacontroller_offlinepartitionscount"]) == {ids: 0.0}
    requests = samples(found["kafka_network_requestmetrics_requests"], "_total")
    assert requests == {ids + (("request", "Produce"),): 3.0,
                        ids + (("request", "Fetch"),): 1.0}
    total_time = found["kafka_network_requestmetrics_totaltimems"]
    assert total_time.type == "histogram"
    produce = {s.labels["le"]: s.value for s in total_time.samples
               if s.name.endswith("_bucket") and s.labels["request"] == "Produce"}
    assert produce == {"1.0": 1.0, "5.0": 2.0, "10.0": 3.0, "50.0": 3.0, "+Inf": 3.0}
    # a role counter with no Kafka name keeps ringlog's
    assert samples(found["ringlog_ring_occupancy_bytes"]) == {
        (("key", ""), ("name", "broker-0"), ("pid", "11"), ("role", "broker")): 4096.0}
    latency_ms = {s.labels["key"] for s in found["ringlog_request_latency_ms"].samples}
    assert latency_ms == {"Produce", "Fetch"}


def test_client_figures_carry_kafka_client_names(capsys, cluster_dir, fake_pages):
    found = scrape(capsys, cluster_dir, fake_pages, [PRODUCER, CONSUMER])
    producer = (("client_id", "producer-1"), ("pid", "12"))
    consumer = (("client_id", "consumer-1"), ("pid", "13"))
    assert samples(found["kafka_producer_producer_metrics_record_send"], "_total") == {
        producer: 1000.0}
    assert samples(found["kafka_producer_producer_metrics_buffer_available_bytes"]) == {
        producer: 33554432.0}
    assert samples(found["kafka_producer_producer_metrics_outgoing_byte"], "_total") == {
        producer: 100000.0}
    assert samples(found["kafka_producer_producer_metrics_waiting_threads"]) == {producer: 1.0}
    assert samples(found["kafka_producer_producer_metrics_request_latency_avg"]) == {
        producer: 3.0}
    assert samples(found["kafka_consumer_consumer_fetch_manager_metrics_records_consumed"],
                   "_total") == {consumer: 900.0}
    assert samples(found["kafka_consumer_consumer_fetch_manager_metrics_records_lag_max"]) == {
        consumer: 100.0}
    assert samples(found["kafka_consumer_consumer_fetch_manager_metrics_fetch_latency_max"]) == {
        consumer: 5.0}
    alive = samples(found["ringlog_process_alive"])
    assert {dict(k)["name"]: v for k, v in alive.items()} == {"producer-1": 1.0,
                                                             "consumer-1": 0.0}


def test_memory_cpu_and_gc_of_every_process(capsys, cluster_dir, fake_pages):
    found = scrape(capsys, cluster_dir, fake_pages, [BROKER, PRODUCER])
    rss = samples(found["ringlog_process_resident_memory_bytes"])
    assert {dict(k)["role"]: v for k, v in rss.items()} == {"broker": 50 << 20,
                                                           "producer": 50 << 20}
    cpu = samples(found["ringlog_process_cpu_seconds"], "_total")
    assert {(dict(k)["pid"], dict(k)["mode"]): v for k, v in cpu.items()} == {
        ("11", "user"): 1.0, ("11", "system"): 0.5, ("12", "user"): 1.0, ("12", "system"): 0.5}
    assert "ringlog_process_context_switches" in found
    collections = samples(found["ringlog_gc_collections"], "_total")
    broker_gens = {dict(k)["generation"]: v for k, v in collections.items()
                   if dict(k)["pid"] == "11"}
    assert broker_gens == {"0": 5.0, "1": 1.0, "2": 0.0}
    pauses = found["ringlog_gc_pause_seconds"]
    assert pauses.type == "histogram"
    gen0 = {s.labels["le"]: s.value for s in pauses.samples if s.name.endswith("_bucket")
            and s.labels["pid"] == "11" and s.labels["generation"] == "0"}
    assert gen0["1e-05"] == 0.0 and gen0["3e-05"] == 5.0 and gen0["+Inf"] == 5.0
    gen1_sum = [s.value for s in pauses.samples if s.name.endswith("_sum")
                and s.labels["pid"] == "11" and s.labels["generation"] == "1"]
    assert gen1_sum == [pytest.approx(0.002)]


def test_no_cluster_in_the_data_directory(capsys, tmp_path):
    assert run_tool(metrics, "--data-dir", tmp_path / "none", "--once") == 1
    assert "holds no ringlog cluster" in capsys.readouterr().err


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.com"])
def test_only_loopback_is_served(capsys, cluster_dir, fake_pages, host):
    assert run_tool(metrics, "--data-dir", cluster_dir, "--prometheus-port", 0,
                    "--host", host) == 1
    assert "--host must be a loopback address" in capsys.readouterr().err


def test_a_port_is_required_without_once(capsys, cluster_dir, fake_pages):
    assert run_tool(metrics, "--data-dir", cluster_dir) == 1
    assert "--prometheus-port must be specified" in capsys.readouterr().err
