"""Per-process figures from stats snapshots: what ``ringlog top`` shows and prints as JSON.

A ``Row`` is one process: its gauges from the newest snapshot and its rates from the
difference of two snapshots of the same process (same pid and start time), divided by the
time between the two publishes (the snapshots' ``updated``), not by the reader's clock.
A process seen once, or whose page was not republished between the two reads, has no
rates (None).

Pure functions of ``ProcessSnapshot`` values: any thread.
"""
from __future__ import annotations

import dataclasses

from cluster.stats.snapshot import GC_PAUSE_BOUNDS, Histogram

#: The role counters a row reads (Kafka's names, as the roles publish them): records in
#: (a broker's appends, a consumer's records consumed) and out (a producer's records sent);
#: the first of the names a page has counts.
RECORDS_IN = ("records-in-total", "records-consumed-total")
RECORDS_OUT = ("record-send-total",)
LAG = "records-lag-max"
#: The request latency histograms (ms): a broker's handling time and a producer's request
#: time, per API ("request-latency-ms:Produce"). Not a consumer's ``fetch-latency-ms``: a
#: fetch waits for records by design (long poll, up to ``fetch.max.wait.ms``), so its time
#: says how idle the topic was, not how slow the cluster.
REQUEST_LATENCY = ("request-latency-ms",)
#: The client roles a page's counters show, beside the role the page was created with: one
#: process has one page, named after its first client, and a process that consumes and
#: produces (consume-transform-produce) publishes both clients' counters there.
CLIENT_ROLES = (("producer", RECORDS_OUT), ("consumer", ("records-consumed-total",)))


def first_counter(counters, names):
    """The value of the first of ``names`` in ``counters``, or None."""
    return next((counters[name] for name in names if name in counters), None)


def role(snapshot):
    """What the process is: the page's role, or, for a client page, every client role its
    counters show ("consumer+producer" for a process with both)."""
    if snapshot.role not in dict(CLIENT_ROLES):
        return snapshot.role
    shown = [name for name, counters in CLIENT_ROLES
             if name == snapshot.role or any(c in snapshot.counters for c in counters)]
    return "+".join(sorted(shown))


def key(snapshot):
    """What tells one process from another, across pid reuse: (pid, start time)."""
    return snapshot.pid, snapshot.start_time


def state(snapshot):
    """``dead`` (no process with the page's pid and start time), ``stale`` (alive, page not
    updated for three publishing intervals: hung or stopped) or ``alive``."""
    if not snapshot.alive:
        return "dead"
    return "stale" if snapshot.stale else "alive"


def gc_pauses(snapshot):
    """One GC pause histogram (seconds) over the three generations."""
    counts = [sum(g.pause_histogram[i] for g in snapshot.gc)
              for i in range(len(GC_PAUSE_BOUNDS) + 1)]
    return Histogram(GC_PAUSE_BOUNDS, tuple(counts), sum(g.pause_total for g in snapshot.gc),
                     max(g.pause_max for g in snapshot.gc))


def histogram_delta(before, after):
    """The values ``after`` holds that ``before`` did not: counts and total subtracted
    (``max`` stays ``after``'s, the largest since the start: an upper bound)."""
    if before is None or before.bounds != after.bounds:
        return after
    return Histogram(after.bounds, tuple(a - b for a, b in zip(after.counts, before.counts)),
                     after.total - before.total, after.max)


def request_latency(snapshot):
    """All of a process's request latency histograms (ms) merged into one, or None."""
    found = [h for name, h in snapshot.histograms.items()
             if name.split(":", 1)[0] in REQUEST_LATENCY]
    if not found:
        return None
    bounds = found[0].bounds
    same = [h for h in found if h.bounds == bounds]
    return Histogram(bounds, tuple(map(sum, zip(*(h.counts for h in same)))),
                     sum(h.total for h in same), max(h.max for h in same))


@dataclasses.dataclass(frozen=True)
class Row:
    """One process as ``top`` shows it. Memory in bytes, times in seconds, rates per second
    (None without two publishes of the process to compare)."""

    role: str
    name: str
    pid: int
    state: str
    start_time: float
    updated: float
    rss: int
    uss: int
    pss: int
    cpu_user: float
    cpu_system: float
    threads: int
    ctx_voluntary: int
    ctx_involuntary: int
    gc_collections: tuple[int, int, int]
    gc_pause_total: float
    gc_pause_p99: float
    gc_pause_max: float
    records_in: float | None  # totals, None when the role does not count them
    records_out: float | None
    lag: float | None
    counters: dict[str, float]
    cpu_percent: float | None = None
    ctx_voluntary_per_s: float | None = None
    ctx_involuntary_per_s: float | None = None
    gc_collections_per_s: tuple[float, float, float] | None = None
    gc_pause_share: float | None = None  # seconds paused per second
    records_in_per_s: float | None = None
    records_out_per_s: float | None = None

    def to_json(self):
        return dataclasses.asdict(self)


def row(snapshot, before=None):
    """The ``Row`` of ``snapshot``, with rates when ``before`` is an earlier publish of the
    same process (``key``); ``before`` of another process is a caller's error."""
    if before is not None and key(before) != key(snapshot):
        raise ValueError(f"rates need two snapshots of one process, found {key(before)} and "
                         f"{key(snapshot)}")
    pauses = gc_pauses(snapshot)
    counters = snapshot.counters
    fields = dict(
        role=role(snapshot), name=snapshot.name, pid=snapshot.pid, state=state(snapshot),
        start_time=snapshot.start_time, updated=snapshot.updated, rss=snapshot.rss,
        uss=snapshot.uss, pss=snapshot.pss, cpu_user=snapshot.cpu_user,
        cpu_system=snapshot.cpu_system, threads=snapshot.threads,
        ctx_voluntary=snapshot.ctx_voluntary, ctx_involuntary=snapshot.ctx_involuntary,
        gc_collections=tuple(g.collections for g in snapshot.gc),
        gc_pause_total=pauses.total, gc_pause_p99=pauses.quantile(0.99),
        gc_pause_max=pauses.max, records_in=first_counter(counters, RECORDS_IN),
        records_out=first_counter(counters, RECORDS_OUT), lag=counters.get(LAG),
        counters=dict(counters))
    elapsed = snapshot.updated - before.updated if before is not None else 0.0
    if elapsed > 0:
        def rate(now, then):
            return None if now is None or then is None else (now - then) / elapsed
        fields.update(
            cpu_percent=100.0 * rate(snapshot.cpu_user + snapshot.cpu_system,
                                     before.cpu_user + before.cpu_system),
            ctx_voluntary_per_s=rate(snapshot.ctx_voluntary, before.ctx_voluntary),
            ctx_involuntary_per_s=rate(snapshot.ctx_involuntary, before.ctx_involuntary),
            gc_collections_per_s=tuple(rate(g.collections, h.collections)
                                       for g, h in zip(snapshot.gc, before.gc)),
            gc_pause_share=rate(pauses.total, sum(g.pause_total for g in before.gc)),
            records_in_per_s=rate(first_counter(counters, RECORDS_IN),
                                  first_counter(before.counters, RECORDS_IN)),
            records_out_per_s=rate(first_counter(counters, RECORDS_OUT),
                                   first_counter(before.counters, RECORDS_OUT)))
    return Row(**fields)


def rows(snapshots, earlier=()):
    """A ``Row`` per snapshot, with rates against the snapshot of the same process in
    ``earlier`` (another read of the pages) when there is one."""
    before = {key(s): s for s in earlier}
    return [row(s, before.get(key(s))) for s in snapshots]


#: ``--sort`` columns: name -> (what to sort by, largest first?).
SORT_KEYS = {
    "role": (lambda r: (r.role, r.name, r.pid), False),
    "name": (lambda r: (r.name, r.pid), False),
    "pid": (lambda r: r.pid, False),
    "state": (lambda r: (r.state, r.role, r.name), False),
    "rss": (lambda r: r.rss, True),
    "uss": (lambda r: r.uss, True),
    "cpu": (lambda r: r.cpu_percent or 0.0, True),
    "gc0": (lambda r: (r.gc_collections_per_s or (0.0,) * 3)[0], True),
    "gc1": (lambda r: (r.gc_collections_per_s or (0.0,) * 3)[1], True),
    "gc2": (lambda r: (r.gc_collections_per_s or (0.0,) * 3)[2], True),
    "pause-p99": (lambda r: r.gc_pause_p99, True),
    "pause-max": (lambda r: r.gc_pause_max, True),
    "in": (lambda r: r.records_in_per_s or 0.0, True),
    "out": (lambda r: r.records_out_per_s or 0.0, True),
    "lag": (lambda r: r.lag or 0.0, True),
}


def sort_rows(found, column="role"):
    """``found`` ordered by a ``SORT_KEYS`` column (numbers largest first)."""
    by, descending = SORT_KEYS[column]
    return sorted(found, key=by, reverse=descending)


class RateTracker:
    """Rows from successive reads of the pages: each process's rates come from its two
    newest distinct publishes, so a read that finds a page not yet republished keeps the
    rates it had, while its state (stale, dead) is the newest read's.

    Single owner (the command's loop).
    """

    def __init__(self):
        self._last = {}   # key -> newest snapshot with a distinct ``updated``
        self._prior = {}  # key -> the distinct publish before it

    def update(self, snapshots):
        """The rows of this read (``snapshots``); forgets processes whose pages are gone."""
        found = []
        for snapshot in snapshots:
            k = key(snapshot)
            last = self._last.get(k)
            if last is None or snapshot.updated != last.updated:
                if last is not None:
                    self._prior[k] = last
                self._last[k] = snapshot
            found.append(row(snapshot, self._prior.get(k)))
        present = {key(s) for s in snapshots}
        for gone in set(self._last) - present:
            del self._last[gone]
            self._prior.pop(gone, None)
        return found

    def missing_rates(self, snapshots):
        """Live processes among ``snapshots`` with no two publishes to compare yet."""
        return [s for s in snapshots if s.alive and key(s) not in self._prior]
