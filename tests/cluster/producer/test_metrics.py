"""KafkaProducer.metrics() against fake brokers: kafka-python's groups and names, and
figures that follow what was sent (counts, sizes, ratios; never timings)."""
from __future__ import annotations

import pytest

from cluster.errors import NotLeaderForPartitionError
from cluster.producer.producer_metrics import GROUP, TOPIC_GROUP
from tests.support.bounds import IN_PROCESS_BOUND

PRODUCER_SETTINGS = {"linger_ms": 0, "reconnect_backoff_ms": 5, "reconnect_backoff_max_ms": 50}

#: kafka-python's producer-metrics names ringlog reports.
KAFKA_PYTHON_NAMES = {
    "record-send-rate", "record-send-total", "record-error-rate", "record-error-total",
    "record-retry-rate", "record-retry-total", "batch-size-avg", "batch-size-max",
    "compression-rate-avg", "record-queue-time-avg", "record-queue-time-max",
    "records-per-request-avg", "request-rate", "request-total", "request-size-avg",
    "request-size-max", "request-latency-avg", "request-latency-max", "outgoing-byte-rate",
    "outgoing-byte-total", "requests-in-flight", "buffer-total-bytes",
    "buffer-available-bytes", "bufferpool-wait-ratio", "bufferpool-wait-time-ns-total",
    "buffer-exhausted-rate", "buffer-exhausted-total"}


def test_a_new_producer_reports_every_name_at_zero(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    producer = producer_of(cluster)
    groups = producer.metrics()
    assert set(groups) == {GROUP}
    metrics = groups[GROUP]
    assert set(metrics) == KAFKA_PYTHON_NAMES
    moving = {name: value for name, value in metrics.items()
              if name not in ("buffer-total-bytes", "buffer-available-bytes") and value}
    assert moving == {}
    assert metrics["buffer-available-bytes"] == metrics["buffer-total-bytes"] > 0


def test_sends_move_the_rates_sizes_and_the_topic_group(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster, batch_size=1024, linger_ms=20)
    futures = [producer.send("logs", b"x" * 100, partition=0) for _ in range(200)]
    producer.flush(IN_PROCESS_BOUND)
    assert all(f.get(0) for f in futures)
    metrics = producer.metrics()[GROUP]
    batches = cluster.batches("logs", 0)
    sizes = [len(data) for _, data in batches]
    assert metrics["record-send-total"] == 200
    assert metrics["record-send-rate"] > 0 and metrics["outgoing-byte-rate"] > 0
    assert metrics["request-rate"] > 0
    assert metrics["batch-size-max"] == max(sizes)
    assert metrics["batch-size-avg"] == pytest.approx(sum(sizes) / len(sizes))
    assert metrics["outgoing-byte-total"] == sum(sizes)
    assert metrics["records-per-request-avg"] == pytest.approx(200 / metrics["request-total"])
    assert metrics["request-size-max"] <= metrics["outgoing-byte-total"]
    assert metrics["compression-rate-avg"] == pytest.approx(1.0, abs=0.05)  # no codec
    assert 0 <= metrics["record-queue-time-avg"] <= metrics["record-queue-time-max"]
    assert 0 < metrics["request-latency-avg"] <= metrics["request-latency-max"]
    assert metrics["requests-in-flight"] == 0
    assert metrics["record-error-total"] == metrics["record-retry-total"] == 0
    topic = producer.metrics()[TOPIC_GROUP + "logs"]
    assert topic["record-send-total"] == 200 and topic["record-send-rate"] > 0
    assert topic["byte-total"] == sum(sizes) and topic["byte-rate"] > 0
    assert topic["record-error-total"] == 0


def test_compression_rate_is_built_bytes_over_uncompressed(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster, compression_type="gzip", linger_ms=20)
    for _ in range(100):
        producer.send("logs", b"a" * 1000, partition=0)
    producer.flush(IN_PROCESS_BOUND)
    assert producer.metrics()[GROUP]["compression-rate-avg"] < 0.2


def test_retries_and_errors_have_rates(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("flaky")
    producer = producer_of(cluster, retries=1)
    cluster.fail_next("flaky", 0, NotLeaderForPartitionError.errno, times=2)
    with pytest.raises(NotLeaderForPartitionError):
        producer.send("flaky", b"a").get(IN_PROCESS_BOUND)
    metrics = producer.metrics()
    assert metrics[GROUP]["record-retry-total"] == 1 and metrics[GROUP]["record-retry-rate"] > 0
    assert metrics[GROUP]["record-error-total"] == 1 and metrics[GROUP]["record-error-rate"] > 0
    assert metrics[TOPIC_GROUP + "flaky"]["record-error-total"] == 1


def test_a_callback_sees_its_batch_counted(fake_cluster, producer_of):
    """The sender records a pass's acknowledged batches together, before it completes
    their futures: a callback (or a caller woken by get()) sees its own batch counted."""
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    producer = producer_of(cluster)
    seen = []
    for _ in range(30):
        producer.send("logs", b"x", partition=0).add_callback(
            lambda _: seen.append(producer.metrics()[GROUP]["record-send-total"]))
    producer.flush(IN_PROCESS_BOUND)
    assert len(seen) == 30
    assert all(count >= done for done, count in enumerate(seen, 1))
    assert producer.metrics()[GROUP]["record-send-total"] == 30
