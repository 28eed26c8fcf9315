"""The producer's figures for its process's stats page (``cluster.stats``).

``ProducerStatsSource(sender, pool)`` is the source the stats publisher thread calls once
per interval; it reads the sender's counters (``SenderMetrics``, plain numbers the sender
thread keeps) and the BufferPool's figures (under the pool's lock, once per interval),
so ``send()`` pays nothing for the page. Names, as Kafka's producer-metrics:
``record-send-total``, ``record-error-total``, ``record-retry-total``,
``outgoing-byte-total``, ``request-total``, ``buffer-total-bytes``,
``buffer-available-bytes``, ``bufferpool-waiters``, ``bufferpool-wait-time-ns-total``,
``buffer-exhausted-total``; histogram ``request-latency-ms:Produce``.
"""
from __future__ import annotations


class ProducerStatsSource:
    """A stats source over one producer's sender and pool (module doc)."""

    def __init__(self, sender, pool):
        self._sender = sender
        self._pool = pool

    def __call__(self):
        m = self._sender.metrics
        pool = self._pool
        counters = {
            "record-send-total": m.record_send_total,
            "record-error-total": m.record_error_total,
            "record-retry-total": m.record_retry_total,
            "outgoing-byte-total": m.outgoing_byte_total,
            "request-total": m.request_total,
            "buffer-total-bytes": pool.total_memory,
            "buffer-available-bytes": pool.available_memory,
            "bufferpool-waiters": pool.queued,
            "bufferpool-wait-time-ns-total": pool.wait_time_ns_total,
            "buffer-exhausted-total": pool.exhausted_total,
        }
        return counters, {"request-latency-ms:Produce": m.request_latency_ms}
