"""Windowed statistics for the clients' ``metrics()``: Kafka's SampledStat (Rate, Avg, Max).

A ``SampledStat`` keeps the count, sum and maximum of the values recorded in each of the
last ``samples`` windows of ``window`` seconds (kafka-python's ``metrics_num_samples`` and
``metrics_sample_window_ms``, 2 and 30 s by default). ``rate()`` divides the sum by the time
those samples span, at least ``(samples - 1) * window`` (Kafka's ``Rate.windowSize``), so a
young client's rate is not overstated; ``avg()`` and ``max()`` cover the same samples;
``count_rate()`` counts the recordings instead of summing them (one stat of request sizes
gives both request-rate and outgoing-byte-rate); ``lifetime_total`` and ``lifetime_count``
never forget (Kafka's ``CumulativeSum``, the ``-total`` metrics).

Callers record per batch, per request or per poll, never per record.

Threads: one writer thread calls ``record``; any thread may read. A reader takes the samples
with one ``tuple(deque)`` (atomic under the GIL: no Python code runs while it copies) and
skips the expired ones instead of purging them, so only the writer mutates the deque; a
reader racing a ``record`` may see one sample's count without its value, which moves a
figure by one sample's worth at most.
"""
from __future__ import annotations

import collections


class _Sample:
    __slots__ = ("start", "count", "total", "max")

    def __init__(self, start):
        self.start = start
        self.count = 0
        self.total = 0.0
        self.max = float("-inf")


class SampledStat:
    """Count, sum and maximum of recorded values over the last ``samples`` windows of
    ``window`` seconds; ``clock``: monotonic seconds (module doc)."""

    def __init__(self, samples, window, clock):
        self._samples = collections.deque()
        self._keep = samples
        self._window = window
        self._clock = clock
        self._current = None  # the newest sample (the writer's)
        self._until = float("-inf")  # the clock value at which its window ends
        self.lifetime_total = 0.0
        self.lifetime_count = 0

    def record(self, value=1.0, now=None):
        """Add ``value`` to the current window (writer thread only); ``now``: the clock's
        reading, if the caller has one. Expired samples are dropped only when a window
        begins (readers skip them anyway), so most calls do one comparison."""
        self.record_many(value, 1, value, self._clock() if now is None else now)

    def record_many(self, total, count, largest, now):
        """Record ``count`` values summing to ``total``, the largest ``largest``, at clock
        ``now``: the same figures as ``count`` calls of ``record`` then (one call per
        request for values recorded per batch)."""
        sample = self._current if now < self._until else self._begin(now)
        sample.count += count
        sample.total += total
        if largest > sample.max:
            sample.max = largest
        self.lifetime_total += total
        self.lifetime_count += count

    def _begin(self, now):
        """Start a window at ``now``, dropping the expired samples; returns its sample."""
        samples = self._samples
        horizon = self._keep * self._window
        while samples and now - samples[0].start >= horizon:
            samples.popleft()
        self._current = sample = _Sample(now)
        self._until = now + self._window
        samples.append(sample)
        return sample

    def _live(self, now):
        """The samples younger than ``samples`` windows (a copy; module doc)."""
        horizon = self._keep * self._window
        return [s for s in tuple(self._samples) if now - s.start < horizon]

    def rate(self):
        """Sum of the values per second over the samples' span (0.0 with none)."""
        now = self._clock()
        live = self._live(now)
        if not live:
            return 0.0
        elapsed = max(now - live[0].start, (self._keep - 1) * self._window)
        return sum(s.total for s in live) / elapsed if elapsed > 0 else 0.0

    def count_rate(self):
        """Recordings per second over the samples' span (0.0 with none)."""
        now = self._clock()
        live = self._live(now)
        if not live:
            return 0.0
        elapsed = max(now - live[0].start, (self._keep - 1) * self._window)
        return sum(s.count for s in live) / elapsed if elapsed > 0 else 0.0

    def avg(self):
        """Mean of the values recorded in the samples (0.0 with none)."""
        live = self._live(self._clock())
        count = sum(s.count for s in live)
        return sum(s.total for s in live) / count if count else 0.0

    def max(self):
        """Largest value recorded in the samples (0.0 with none)."""
        return max((s.max for s in self._live(self._clock()) if s.count), default=0.0)
