"""The consumer's fetch metrics, with the names kafka-python's ``metrics()`` reports.

Group ``consumer-fetch-manager-metrics``:

    fetch-total, fetch-rate                 Fetch responses received
    fetch-latency-avg, fetch-latency-max    ms from sending a Fetch to its response
    fetch-size-avg, fetch-size-max          record bytes per response
    bytes-consumed-total / -rate            record bytes fetched
    records-consumed-total / -rate          records handed to the application
    records-per-request-avg                 records per Fetch response
    records-lag-max                         largest high watermark - position seen
    fetch-error-total, fetch-error-rate     (ringlog's) Fetch requests that failed as a
                                            whole: broker gone, timed out

Rates, averages and maxima cover the last ``samples`` windows of ``window`` seconds
(kafka-python's ``metrics_num_samples`` and ``metrics_sample_window_ms``):
``cluster.client.sampled_stat``.

Owner: the consumer's thread; ``clock`` (monotonic seconds) is injectable.
"""
from __future__ import annotations

import time

from cluster.client.sampled_stat import SampledStat
from cluster.stats.publisher import LATENCY_MS_BOUNDS, LatencyHistogram

GROUP = "consumer-fetch-manager-metrics"


class FetchMetrics:
    """The fetch metrics of one consumer (module doc)."""

    def __init__(self, samples=2, window=30.0, clock=time.monotonic):
        def stat():
            return SampledStat(samples, window, clock)
        self._clock = clock
        self.fetches = stat()
        self.fetch_latency = stat()
        self.fetch_size = stat()
        self.records_per_fetch = stat()
        self.records_consumed = stat()
        self.fetch_errors = stat()
        self.records_lag = stat()
        self.fetch_latency_ms = LatencyHistogram(LATENCY_MS_BOUNDS)  # for the stats page

    def fetch_received(self, latency, size, records):
        """A Fetch response came ``latency`` seconds after its request, with ``size`` record
        bytes holding ``records`` records."""
        now = self._clock()  # one reading for the four stats (``record_many``: one call each)
        milliseconds = latency * 1000
        self.fetches.record_many(1.0, 1, 1.0, now)
        self.fetch_latency.record_many(milliseconds, 1, milliseconds, now)
        self.fetch_latency_ms.record(milliseconds)
        self.fetch_size.record_many(size, 1, size, now)
        self.records_per_fetch.record_many(records, 1, records, now)

    def consumed(self, records):
        self.records_consumed.record_many(records, 1, records, self._clock())

    def fetch_failed(self):
        self.fetch_errors.record()

    def lag(self, lag):
        self.records_lag.record_many(lag, 1, lag, self._clock())

    def snapshot(self):
        """``{GROUP: {name: value}}``, kafka-python's ``metrics()`` shape."""
        return {GROUP: {
            "fetch-total": self.fetches.lifetime_total,
            "fetch-rate": self.fetches.rate(),
            "fetch-latency-avg": self.fetch_latency.avg(),
            "fetch-latency-max": self.fetch_latency.max(),
            "fetch-size-avg": self.fetch_size.avg(),
            "fetch-size-max": self.fetch_size.max(),
            "bytes-consumed-total": self.fetch_size.lifetime_total,
            "bytes-consumed-rate": self.fetch_size.rate(),
            "records-consumed-total": self.records_consumed.lifetime_total,
            "records-consumed-rate": self.records_consumed.rate(),
            "records-per-request-avg": self.records_per_fetch.avg(),
            "records-lag-max": self.records_lag.max(),
            "fetch-error-total": self.fetch_errors.lifetime_total,
            "fetch-error-rate": self.fetch_errors.rate(),
        }}
