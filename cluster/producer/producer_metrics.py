"""The producer's metrics, with the groups and names kafka-python's ``metrics()`` reports.

Group ``producer-metrics``:

    record-send-rate / -total           records acknowledged (acks=0: written)
    record-error-rate / -total          records failed for good
    record-retry-rate / -total          records put back for another attempt
    batch-size-avg / -max               bytes per batch sent (as built: compressed)
    compression-rate-avg                built bytes / uncompressed bytes, per batch sent
    record-queue-time-avg / -max        ms a batch waited from creation to its request
    records-per-request-avg             records per Produce request
    request-rate / -total               Produce requests written
    request-size-avg / -max             batch bytes per Produce request
    request-latency-avg / -max          ms from writing a request to handling its response
    outgoing-byte-rate / -total         batch bytes written
    requests-in-flight                  requests written and not answered
    buffer-total-bytes                  buffer_memory
    buffer-available-bytes              of it, not held by batches
    bufferpool-wait-ratio               share of time send() blocked for memory
    bufferpool-wait-time-ns-total       ns send() blocked for memory
    buffer-exhausted-rate / -total      allocations that ran out of max_block_ms

Group ``producer-topic-metrics.<topic>`` (kafka-python's per-topic group), per topic sent:
record-send-rate / -total, byte-rate / byte-total, record-error-rate / -total.

Each figure is recorded per batch or per request, never per record; rates, averages and
maxima cover the last ``metrics_num_samples`` windows of ``metrics_sample_window_ms``
(``cluster.client.sampled_stat``), the ``-total`` figures the producer's life.

Threads: the Sender thread writes (``SenderMetrics``); any thread reads (``snapshot``).
"""
from __future__ import annotations

import time

from cluster.client.sampled_stat import SampledStat
from cluster.stats.publisher import LATENCY_MS_BOUNDS, LatencyHistogram

GROUP = "producer-metrics"
TOPIC_GROUP = "producer-topic-metrics."


class TopicMetrics:
    """The per-topic stats of one topic (records and bytes acknowledged, records failed)."""

    __slots__ = ("records", "bytes", "errors")

    def __init__(self, stat):
        self.records = stat()
        self.bytes = stat()
        self.errors = stat()


class SenderMetrics:
    """What the sender records (module doc); single writer: the Sender thread.

    The counters (``record_send_total`` ... ``outgoing_byte_total``) are plain ints and
    floats other threads may copy at any time; the ``SampledStat``s give the windowed
    figures."""

    def __init__(self, samples=2, window=30.0, clock=time.monotonic):
        self.record_send_total = 0
        self.record_error_total = 0
        self.record_retry_total = 0
        self.batch_total = 0
        self.batch_bytes_total = 0
        self.batch_bytes_max = 0
        self.request_total = 0
        self.request_latency_total = 0.0
        self.request_latency_max = 0.0
        self.outgoing_byte_total = 0

        def stat():
            return SampledStat(samples, window, clock)
        self._stat = stat
        self.record_send = stat()       # records per completed batch
        self.record_error = stat()      # records per failed batch
        self.record_retry = stat()      # records per retried batch
        self.batch_size = stat()        # bytes per batch sent
        self.compression_rate = stat()  # built / uncompressed bytes per batch built
        self.queue_time = stat()        # ms from batch creation to its first request
        self.request_size = stat()      # batch bytes per request
        self.request_records = stat()   # records per request
        self.request_latency = stat()   # ms per answered request
        self.request_latency_ms = LatencyHistogram(LATENCY_MS_BOUNDS)  # the stats page's
        self.topics = {}                # topic -> TopicMetrics

    def topic(self, topic):
        """The TopicMetrics of ``topic``, made on its first batch."""
        metrics = self.topics.get(topic)
        if metrics is None:
            self.topics[topic] = metrics = TopicMetrics(self._stat)
        return metrics


def snapshot(metrics, pool, in_flight):
    """``{group: {name: value}}`` (module doc) from a SenderMetrics ``metrics``, the
    producer's BufferPool ``pool`` and the count of requests ``in_flight``."""
    wait = pool.wait_time
    groups = {GROUP: {
        "record-send-rate": metrics.record_send.rate(),
        "record-send-total": metrics.record_send_total,
        "record-error-rate": metrics.record_error.rate(),
        "record-error-total": metrics.record_error_total,
        "record-retry-rate": metrics.record_retry.rate(),
        "record-retry-total": metrics.record_retry_total,
        "batch-size-avg": metrics.batch_size.avg(),
        "batch-size-max": metrics.batch_size.max(),
        "compression-rate-avg": metrics.compression_rate.avg(),
        "record-queue-time-avg": metrics.queue_time.avg(),
        "record-queue-time-max": metrics.queue_time.max(),
        "records-per-request-avg": metrics.request_records.avg(),
        "request-rate": metrics.request_size.count_rate(),
        "request-total": metrics.request_total,
        "request-size-avg": metrics.request_size.avg(),
        "request-size-max": metrics.request_size.max(),
        "request-latency-avg": metrics.request_latency.avg(),
        "request-latency-max": metrics.request_latency.max(),
        "outgoing-byte-rate": metrics.request_size.rate(),
        "outgoing-byte-total": metrics.outgoing_byte_total,
        "requests-in-flight": in_flight,
        "buffer-total-bytes": pool.total_memory,
        "buffer-available-bytes": pool.available_memory,
        "bufferpool-wait-ratio": wait.rate() / 1e9,
        "bufferpool-wait-time-ns-total": pool.wait_time_ns_total,
        "buffer-exhausted-rate": pool.exhausted.count_rate(),
        "buffer-exhausted-total": pool.exhausted_total,
    }}
    for topic, stats in list(metrics.topics.items()):
        groups[TOPIC_GROUP + topic] = {
            "record-send-rate": stats.records.rate(),
            "record-send-total": stats.records.lifetime_total,
            "byte-rate": stats.bytes.rate(),
            "byte-total": stats.bytes.lifetime_total,
            "record-error-rate": stats.errors.rate(),
            "record-error-total": stats.errors.lifetime_total,
        }
    return groups
