"""Stats snapshots made by hand, for the tests of the tools that read the pages:
``snapshot(**fields)`` (a live broker unless told otherwise), ``generation(collections,
pauses)`` (one GC generation's figures) and ``latency(values)`` (a latency histogram)."""
from __future__ import annotations

from cluster.stats.snapshot import GC_PAUSE_BOUNDS, GenerationStats, Histogram, ProcessSnapshot


def generation(collections=0, pauses=(), collected=0, uncollectable=0):
    """A generation's figures after ``collections`` collections pausing ``pauses`` s."""
    counts = [0] * (len(GC_PAUSE_BOUNDS) + 1)
    for pause in pauses:
        counts[next((i for i, b in enumerate(GC_PAUSE_BOUNDS) if pause <= b),
                    len(GC_PAUSE_BOUNDS))] += 1
    return GenerationStats(collections, collected, uncollectable, float(sum(pauses)),
                           max(pauses, default=0.0), tuple(counts))


def latency(values, bounds=(1.0, 5.0, 10.0, 50.0)):
    """A latency histogram (ms) holding ``values``."""
    counts = [0] * (len(bounds) + 1)
    for value in values:
        counts[next((i for i, b in enumerate(bounds) if value <= b), len(bounds))] += 1
    return Histogram(tuple(bounds), tuple(counts), float(sum(values)), max(values, default=0.0))


def snapshot(**fields):
    """A ``ProcessSnapshot`` of a live broker (``broker-0``, pid 1000) with ``fields``
    changed."""
    values = dict(role="broker", name="broker-0", pid=1000, start_time=1_700_000_000.0,
                  updated=1_700_000_010.0, interval=1.0, alive=True, stale=False,
                  rss=50 << 20, uss=40 << 20, pss=42 << 20, cpu_user=1.0, cpu_system=0.5,
                  ctx_voluntary=100, ctx_involuntary=10, threads=4,
                  gc=(generation(), generation(), generation()), counters={}, histograms={})
    values.update(fields)
    return ProcessSnapshot(**values)
