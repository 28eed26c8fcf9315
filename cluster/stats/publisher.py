"""The process's stats publisher: one stats page per (process, cluster), refreshed by a thread.

``process_stats(cluster_id, role, name)`` returns a ``StatsRegistration``; the first one of
a cluster in a process creates the page ``/ringlog.<cluster>.stats.<pid>``
(``cluster.stats.page``) and starts a daemon thread that, every ``interval`` seconds
(default 1 s), samples the process through psutil (RSS; USS and PSS from
``memory_full_info``, which reads /proc/<pid>/smaps_rollup: when one read costs more than
``FULL_MEMORY_BUDGET`` it is read only every ``FULL_MEMORY_EVERY`` intervals), the CPU
times, the context switches and threads, the GC figures (``gc_monitor``) and calls every
registered source, then writes the page. Registrations are counted: the last
``close()`` of a cluster's registrations stops the thread and unlinks the page; an
interpreter exit unlinks every page of the process (atexit); a forked child forgets its
parent's publishers (it never writes or unlinks them) and makes its own when it registers.

Sources (``registration.add_source(fn)``): ``fn()`` returns ``(counters, histograms)``,
``{name: number}`` and ``{name: Histogram-like}`` (``bounds``, ``counts``, ``total``,
``max``: ``snapshot.Histogram`` or ``LatencyHistogram``). The role keeps plain Python
counters on its own objects and the source reads them: the hot path pays nothing for the
page (no syscall, no lock, no per-record work); every copy happens in the publisher thread.
A counter that several sources of one process report (two producers in one process) is
summed, except names ending in ``-max``, whose maximum is kept; histograms of one name are
added when their bounds agree. A source whose figures would not fit the page is refused
when it registers (ValueError); one that grows past the limits later is cut to fit, with
one warning.

The role: the first registration of a cluster names the page's role and name, unless the
process declared what it is first (``set_process_role("bridge", ...)``): then every client
the process builds publishes under that role.

``RINGLOG_STATS=0`` in the environment disables publishing: ``process_stats`` returns a
registration that does nothing and no page is created (the overhead A/B of perf).

Thread safety: the module's registry is guarded by ``_LOCK``; a registration's methods may
be called from any thread; sources are called by the publisher thread only, so they must
be safe to call from another thread (reading ints and floats of another thread's objects
under the GIL is).
"""
from __future__ import annotations

import atexit
import bisect
import logging
import os
import threading
import time

import posix_ipc
import psutil

from cluster.stats import page_descriptor as sd
from cluster.stats.gc_monitor import GcMonitor
from cluster.stats.page import PageFigures, StatsPage, check_counters
from shm_ring.naming import stats_page_name

log = logging.getLogger(__name__)

ENVIRONMENT_SWITCH = "RINGLOG_STATS"
"""Environment variable: "0" disables publishing; anything else (or unset) enables it."""

DEFAULT_INTERVAL = 1.0
"""Seconds between publishes."""

FULL_MEMORY_BUDGET = 0.002
"""Seconds one ``memory_full_info`` (USS, PSS) may cost to be read at every publish."""

FULL_MEMORY_EVERY = 10
"""Publishes between two USS/PSS reads when one read costs more than the budget."""


def enabled() -> bool:
    """Whether this process publishes stats (``RINGLOG_STATS`` is not "0")."""
    return os.environ.get(ENVIRONMENT_SWITCH, "1").strip() != "0"


class LatencyHistogram:
    """A mutable histogram a role updates on its own thread (``record(value)``: one bisect
    and two additions) and a source hands to the publisher as it is (the publisher copies
    it). ``bounds`` ascending; ``counts`` has one more entry, for values above them all."""

    __slots__ = ("bounds", "counts", "total", "max")

    def __init__(self, bounds) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.max = 0.0

    def record(self, value, _bisect=bisect.bisect_left) -> None:
        self.counts[_bisect(self.bounds, value)] += 1
        self.total += value
        if value > self.max:
            self.max = value


LATENCY_MS_BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0,
                     500.0, 1000.0, 2500.0, 5000.0, 10000.0)
"""Bucket bounds (milliseconds) of the request latency histograms of the roles."""


class StatsRegistration:
    """One user's hold on its process's stats page of a cluster (a broker, one client).

    ``add_source(fn)`` registers a source (module doc) and returns ``fn``; ``close()``
    removes this registration's sources and drops its hold (the last one unlinks the page);
    safe to call twice. A registration of a disabled process (or a fork child's inherited
    one) does nothing."""

    def __init__(self, publisher: Publisher | None) -> None:
        self._publisher = publisher
        self._sources: list = []

    @property
    def page_name(self) -> str | None:
        """The page's name, or None when publishing is disabled."""
        return None if self._publisher is None else self._publisher.page.name

    def add_source(self, fn):
        if self._publisher is not None:
            self._publisher.add_source(fn)
            self._sources.append(fn)
        return fn

    def close(self) -> None:
        publisher, self._publisher = self._publisher, None
        if publisher is None or publisher.owner_pid != os.getpid():
            return  # disabled, or a fork child's inherited hold: the page is the parent's
        for fn in self._sources:
            publisher.remove_source(fn)
        self._sources.clear()
        _release(publisher)


class Publisher:
    """The page and the thread of one (process, cluster) (see the module doc)."""

    def __init__(self, cluster_id: str, role: str, name: str, interval: float) -> None:
        self.cluster_id = cluster_id
        self.interval = interval
        self.owner_pid = os.getpid()
        self.holders = 0
        self.page = StatsPage.create(cluster_id, role, name, interval)
        self._process = psutil.Process(self.owner_pid)
        self._gc = GcMonitor().start()
        self._sources: list = []
        self._sources_lock = threading.Lock()  # the publisher thread and add/remove_source
        self._stopping = threading.Event()
        self._full_memory_every = 1
        self._publishes = 0
        self._uss = self._pss = 0
        self._warned = False
        self._failed: set = set()  # sources that raised (logged once each)
        self._thread = threading.Thread(target=self._run, daemon=True,
                                         name=f"ringlog-stats-{cluster_id}")
        self._thread.start()

    # -- sources ------------------------------------------------------------------------------

    def add_source(self, fn) -> None:
        counters, histograms = fn()
        with self._sources_lock:
            all_counters, all_histograms = self._collect(self._sources)
            all_counters.update(counters)
            all_histograms.update(histograms)
            check_counters(all_counters, all_histograms)
            self._sources.append(fn)

    def remove_source(self, fn) -> None:
        with self._sources_lock:
            if fn in self._sources:
                self._sources.remove(fn)

    def _collect(self, sources):
        counters: dict[str, float] = {}
        histograms: dict = {}
        for fn in sources:
            try:
                more_counters, more_histograms = fn()
            except Exception:  # one broken source does not hide the others' figures
                if fn not in self._failed:
                    self._failed.add(fn)
                    log.exception("stats page %s: source %r failed", self.page.name, fn)
                continue
            for name, value in more_counters.items():
                if name not in counters:
                    counters[name] = value
                elif name.endswith("-max"):
                    counters[name] = max(counters[name], value)
                else:
                    counters[name] += value
            for name, hist in more_histograms.items():
                seen = histograms.get(name)
                if seen is None:
                    histograms[name] = _Sum(hist)
                elif tuple(seen.bounds) == tuple(hist.bounds):
                    seen.add(hist)
        return counters, histograms

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                self.publish()
            except Exception:
                log.exception("stats page %s: publishing failed", self.page.name)
            if self._stopping.wait(self.interval):
                return

    def publish(self) -> None:
        """Sample and write the page once (the publisher thread; tests)."""
        process = self._process
        with process.oneshot():
            rss = process.memory_info().rss
            cpu = process.cpu_times()
            ctx = process.num_ctx_switches()
            threads = process.num_threads()
        if self._publishes % self._full_memory_every == 0:
            self._sample_full_memory()
        self._publishes += 1
        with self._sources_lock:
            counters, histograms = self._collect(self._sources)
        counters, histograms = self._fit(counters, histograms)
        self.page.write(PageFigures(
            time.time(), rss, self._uss, self._pss, cpu.user, cpu.system, ctx.voluntary,
            ctx.involuntary, threads, self._gc.snapshot(), counters, histograms))

    def _sample_full_memory(self) -> None:
        started = time.perf_counter()
        try:
            full = self._process.memory_full_info()
        except (psutil.AccessDenied, AttributeError):  # no smaps: leave them 0
            return
        self._uss, self._pss = full.uss, getattr(full, "pss", 0)
        if time.perf_counter() - started > FULL_MEMORY_BUDGET:
            self._full_memory_every = FULL_MEMORY_EVERY

    def _fit(self, counters, histograms):
        """Cut what does not fit the page (a source that grew after it registered)."""
        try:
            check_counters(counters, histograms)
            return counters, histograms
        except ValueError as exc:
            if not self._warned:
                self._warned = True
                log.warning("stats page %s: %s; publishing what fits", self.page.name, exc)
        fits = lambda name: len(name.encode()) <= sd.NAME_LENGTH  # noqa: E731
        counters = dict([(k, v) for k, v in counters.items() if fits(k)][:sd.MAX_COUNTERS])
        histograms = dict([(k, v) for k, v in histograms.items()
                           if fits(k) and len(v.bounds) <= sd.MAX_BOUNDS][:sd.MAX_HISTOGRAMS])
        return counters, histograms

    def stop(self, unlink: bool = True) -> None:
        """Stop the thread; unlink (the owner) and unmap the page."""
        self._stopping.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        self._gc.stop()
        if unlink:
            self.page.unlink()
        self.page.close()


class _Sum:
    """Histograms of one name from several sources, added up (a copy, in the publisher
    thread)."""

    def __init__(self, hist) -> None:
        self.bounds = tuple(hist.bounds)
        self.counts = list(hist.counts)
        self.total = hist.total
        self.max = hist.max

    def add(self, hist) -> None:
        self.counts = [a + b for a, b in zip(self.counts, hist.counts)]
        self.total += hist.total
        self.max = max(self.max, hist.max)


# -- the process's registry ----------------------------------------------------------------------

_LOCK = threading.Lock()
_PUBLISHERS: dict[str, Publisher] = {}  # cluster id -> this process's publisher
_PROCESS_ROLE: list = [None]  # (role, name) declared by set_process_role


def set_process_role(role: str | None, name: str | None = None) -> None:
    """Declare what this process is ("bridge", "spark-reader", "chaos-producer" ...): pages
    created afterwards carry this role (and ``name``, default: the role and the pid)
    whatever the clients that create them say. None forgets the declaration."""
    if role is None:
        _PROCESS_ROLE[0] = None
        return
    sd.encode_name(role, sd.ROLE_LENGTH, "role")
    _PROCESS_ROLE[0] = (role, name)


def process_role() -> tuple[str, str] | None:
    """(role, name) declared by ``set_process_role``, or None."""
    return _PROCESS_ROLE[0]


def process_stats(cluster_id: str, role: str, name: str,
                  interval: float = DEFAULT_INTERVAL) -> StatsRegistration:
    """A hold on this process's stats page of ``cluster_id`` (created with ``role``,
    ``name`` and ``interval`` by the first hold; see the module doc)."""
    if not enabled():
        return StatsRegistration(None)
    with _LOCK:
        publisher = _PUBLISHERS.get(cluster_id)
        if publisher is None:
            declared = _PROCESS_ROLE[0]
            if declared is not None:
                role, name = declared[0], declared[1] or f"{declared[0]}-{os.getpid()}"
            try:
                publisher = _create(cluster_id, role, _fit_name(name, role), interval)
            except OSError as exc:  # /dev/shm full, say: the process runs on, unseen
                log.warning("no stats page for cluster %s: %s", cluster_id, exc)
                return StatsRegistration(None)
            _PUBLISHERS[cluster_id] = publisher
        publisher.holders += 1
        return StatsRegistration(publisher)


def _create(cluster_id, role, name, interval) -> Publisher:
    try:
        return Publisher(cluster_id, role, name, interval)
    except FileExistsError:
        # A page under our pid was left by a dead process whose pid we reuse (a process
        # has one page per cluster, and a fork child another pid): it is not anyone's.
        posix_ipc.unlink_shared_memory(stats_page_name(cluster_id, os.getpid()))
        return Publisher(cluster_id, role, name, interval)


def _fit_name(name, role) -> str:
    """``name`` cut to the page's name slot (a client_id may be long), or role-pid."""
    data = (name or "").replace("\0", "").encode()[:sd.PROCESS_NAME_LENGTH]
    return data.decode(errors="ignore") or f"{role}-{os.getpid()}"


def _release(publisher: Publisher) -> None:
    with _LOCK:
        publisher.holders -= 1
        if publisher.holders > 0:
            return
        if _PUBLISHERS.get(publisher.cluster_id) is publisher:
            del _PUBLISHERS[publisher.cluster_id]
    publisher.stop()


def _stop_all() -> None:
    """atexit: unlink every page this process owns."""
    with _LOCK:
        publishers = [p for p in _PUBLISHERS.values() if p.owner_pid == os.getpid()]
        _PUBLISHERS.clear()
    for publisher in publishers:
        publisher.stop()


def _forget_after_fork() -> None:
    """In a fork child: the parent's publishers are not ours (no thread runs them here)."""
    global _LOCK
    _LOCK = threading.Lock()  # the parent's may have been held by another thread
    for publisher in _PUBLISHERS.values():
        publisher._gc.stop()
    _PUBLISHERS.clear()


atexit.register(_stop_all)
os.register_at_fork(after_in_child=_forget_after_fork)
