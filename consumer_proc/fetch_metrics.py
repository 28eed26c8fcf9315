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
(kafka-python's ``metrics_num_samples`` and ``metrics_sample_window_ms``), as Kafka's
SampledStat does: a rate divides by the time those samples span, at least
``(samples - 1) * window``, so a young consumer's rate is not overstated.

Owner: the consumer's thread; ``clock`` (monotonic seconds) is injectable.
"""
from __future__ import annotations

import collections
import time

from cluster.stats.publisher import LATENCY_MS_BOUNDS, LatencyHistogram

GROUP = "consumer-fetch-manager-metrics"


class _Sample:
    __slots__ = ("start", "count", "total", "max")

    def __init__(self, start):
        self.start = start
        self.count = 0
        self.total = 0.0
        self.max = float("-inf")


class SampledStat:
    """Count, sum and maximum of recorded values over the last ``samples`` windows."""

    def __init__(self, samples, window, clock):
        self._samples = collections.deque()
        self._keep = samples
        self._window = window
        self._clock = clock
        self.lifetime_total = 0.0

    def _purge(self, now):
        """Drop the samples older than ``samples`` windows."""
        samples = self._samples
        while samples and now - samples[0].start >= self._keep * self._window:
            samples.popleft()

    def record(self, value=1.0):
        now = self._clock()
        self._purge(now)
        samples = self._samples
        if not samples or now - samples[-1].start >= self._window:
            samples.append(_Sample(now))
        sample = samples[-1]
        sample.count += 1
        sample.total += value
        sample.max = max(sample.max, value)
        self.lifetime_total += value

    def rate(self):
        """Sum of the values per second over the samples' span."""
        now = self._clock()
        self._purge(now)
        if not self._samples:
            return 0.0
        elapsed = max(now - self._samples[0].start, (self._keep - 1) * self._window)
        return sum(s.total for s in self._samples) / elapsed if elapsed > 0 else 0.0

    def avg(self):
        self._purge(self._clock())
        count = sum(s.count for s in self._samples)
        return sum(s.total for s in self._samples) / count if count else 0.0

    def max(self):
        self._purge(self._clock())
        return max((s.max for s in self._samples if s.count), default=0.0)

    def peek_max(self):
        """``max()`` over the samples kept, without dropping old ones: safe from another
        thread (the stats publisher; a copy of the deque is one step under the GIL)."""
        return max((s.max for s in list(self._samples) if s.count), default=0.0)


class FetchMetrics:
    """The fetch metrics of one consumer (module doc)."""

    def __init__(self, samples=2, window=30.0, clock=time.monotonic):
        def stat():
            return SampledStat(samples, window, clock)
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
        self.fetches.record()
        self.fetch_latency.record(latency * 1000)
        self.fetch_latency_ms.record(latency * 1000)
        self.fetch_size.record(size)
        self.records_per_fetch.record(records)

    def consumed(self, records):
        self.records_consumed.record(records)

    def fetch_failed(self):
        self.fetch_errors.record()

    def lag(self, lag):
        self.records_lag.record(lag)

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
