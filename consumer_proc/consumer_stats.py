"""The consumer's figures for its process's stats page (``cluster.stats``).

``ConsumerStatsSource(metrics)`` is the source the stats publisher thread calls once per
interval; it reads the consumer's ``FetchMetrics`` (lifetime totals are plain numbers; the
lag maximum is read without touching the consumer's windows), so ``poll()`` pays nothing
for the page. Names, as Kafka's consumer-fetch-manager-metrics: ``records-consumed-total``,
``bytes-consumed-total``, ``fetch-total``, ``fetch-error-total``, ``records-lag-max``;
histogram ``fetch-latency-ms``.
"""
from __future__ import annotations


class ConsumerStatsSource:
    """A stats source over one consumer's FetchMetrics (module doc)."""

    def __init__(self, metrics):
        self._metrics = metrics

    def __call__(self):
        m = self._metrics
        counters = {
            "records-consumed-total": m.records_consumed.lifetime_total,
            "bytes-consumed-total": m.fetch_size.lifetime_total,
            "fetch-total": m.fetches.lifetime_total,
            "fetch-error-total": m.fetch_errors.lifetime_total,
            "records-lag-max": m.records_lag.peek_max(),
        }
        return counters, {"fetch-latency-ms": m.fetch_latency_ms}
