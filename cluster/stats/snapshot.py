"""What a reader of the stats pages gets for one process: a ``ProcessSnapshot``.

This is the contract between the pages (written by each process's publisher) and the tools
that read them (``ringlog top``, ``metrics``, ``profile``, the demo's table). Values are
totals since the process started (counters) or the figure at ``updated`` (gauges); rates
come from the difference of two snapshots of the same (pid, start_time).

Immutable values: any thread.
"""
from __future__ import annotations

import dataclasses

#: Upper bounds (seconds) of the GC pause histogram buckets; the last bucket is unbounded.
GC_PAUSE_BOUNDS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)


@dataclasses.dataclass(frozen=True)
class GenerationStats:
    """The collector's figures for one generation (0, 1 or 2) since the process started."""

    collections: int
    collected: int
    uncollectable: int
    pause_total: float  # seconds
    pause_max: float  # seconds
    #: len(GC_PAUSE_BOUNDS) + 1 counts: pauses <= each bound, the last one above them all
    pause_histogram: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Histogram:
    """A latency histogram (e.g. request latency of one API): ``counts[i]`` values were
    <= ``bounds[i]``, the last count above every bound; ``total`` their sum, ``max`` the
    largest. Units are in the name of the histogram (``..._ms``, ``..._us``)."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float
    max: float

    @property
    def count(self):
        return sum(self.counts)

    def quantile(self, q):
        """The upper bound of the bucket holding quantile ``q`` (``max`` for the last one);
        0.0 when empty."""
        n = self.count
        if n == 0:
            return 0.0
        rank, seen = q * n, 0
        for bound, count in zip(self.bounds, self.counts):
            seen += count
            if seen >= rank:
                return min(bound, self.max)
        return self.max


@dataclasses.dataclass(frozen=True)
class ProcessSnapshot:
    """One process as its stats page shows it.

    ``role``: "broker", "producer", "consumer", "bridge", "spark-reader", "chaos-producer",
    "chaos-consumer", "tool" ...; ``name``: what tells processes of one role apart
    ("broker-1", a client_id). ``alive``: the pid exists with the page's start time;
    ``stale``: alive but the page was not updated for three publishing intervals (hung,
    stopped). Memory in bytes (``uss``/``pss`` 0 where the kernel does not say), CPU in
    seconds. ``counters``: the role's own figures by Kafka-style name
    ("records-in-total", "bytes-out-total", "buffer-available-bytes", "records-lag-max",
    "under-replicated-partitions", ...); ``histograms``: by name ("request-latency-ms:Produce").
    """

    role: str
    name: str
    pid: int
    start_time: float  # epoch seconds
    updated: float  # epoch seconds of the last publish
    interval: float  # seconds between publishes
    alive: bool
    stale: bool
    rss: int
    uss: int
    pss: int
    cpu_user: float
    cpu_system: float
    ctx_voluntary: int
    ctx_involuntary: int
    threads: int
    gc: tuple[GenerationStats, GenerationStats, GenerationStats]
    counters: dict[str, float]
    histograms: dict[str, Histogram]
