"""A process's stats page: create, write (the owner), open and read (the tools).

``StatsPage.create(cluster_id, role, name, interval)`` makes ``/ringlog.<cluster>.stats.<pid>``
(mode 0600) for the calling process; ``write(figures)`` publishes one ``PageFigures``;
``StatsPage.open(name)`` maps any process's page and ``read()`` returns a consistent
``PageContents`` (header and figures), retrying on a torn copy. Layout and the two-copy
seqlock protocol: ``page_descriptor``.

Owner: one thread of the process writes (the publisher's); the creator unlinks. Readers
each have their own StatsPage (one thread each).
"""
from __future__ import annotations

import dataclasses
import os
import time

import psutil

from cluster.stats import page_descriptor as sd
from cluster.stats.snapshot import GenerationStats, Histogram
from shm_ring.liveness import current_process
from shm_ring.naming import SharedRegion, stats_page_name
from shm_ring.ring_descriptor import require_store_order

_CURRENT = sd.word_index(sd.CURRENT_COPY_OFFSET)
_MAGIC = sd.word_index(sd.MAGIC_OFFSET)

READ_ATTEMPTS = 200
"""Consistent-copy attempts ``read()`` makes before it gives up (TornPageError)."""

RETRY_SLEEP = 0.0002
"""Seconds ``read()`` sleeps between attempts after the first few."""


class TornPageError(Exception):
    """No consistent copy could be read (the writer kept rewriting it, or a writer that was
    SIGSTOPped in the middle of a write on both copies, which one writer never does)."""


@dataclasses.dataclass(frozen=True)
class PageHeader:
    """What a page says about its process (fixed at creation)."""

    role: str
    name: str
    pid: int
    start_ticks: int  # /proc/<pid>/stat starttime
    start_time: float  # epoch seconds
    interval: float  # seconds between publishes


@dataclasses.dataclass(frozen=True)
class PageFigures:
    """One publish: everything in a data copy (see ``snapshot.ProcessSnapshot``)."""

    updated: float
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


@dataclasses.dataclass(frozen=True)
class PageContents:
    header: PageHeader
    figures: PageFigures | None  # None before the first publish


def check_counters(counters, histograms) -> None:
    """ValueError naming the problem if these counters and histograms do not fit a page
    (too many, a name too long, a histogram with too many bounds)."""
    if len(counters) > sd.MAX_COUNTERS:
        raise ValueError(f"{len(counters)} counters do not fit a stats page (at most "
                         f"{sd.MAX_COUNTERS})")
    if len(histograms) > sd.MAX_HISTOGRAMS:
        raise ValueError(f"{len(histograms)} histograms do not fit a stats page (at most "
                         f"{sd.MAX_HISTOGRAMS})")
    for name in counters:
        sd.encode_name(name, sd.NAME_LENGTH, "counter name")
    for name, histogram in histograms.items():
        sd.encode_name(name, sd.NAME_LENGTH, "histogram name")
        bounds = len(histogram.bounds)
        if bounds > sd.MAX_BOUNDS or len(histogram.counts) != bounds + 1:
            raise ValueError(f"histogram {name!r}: {bounds} bounds and {len(histogram.counts)}"
                             f" counts; at most {sd.MAX_BOUNDS} bounds and one count more")


class StatsPage:
    """One mapping of a stats page (see the module doc)."""

    def __init__(self, region: SharedRegion) -> None:
        self._region = region
        self._buf = region.buf
        self._words = region.buf[:sd.HEADER_LENGTH].cast("q")
        self._copies = [region.buf[sd.copy_offset(i):sd.copy_offset(i) + sd.COPY_LENGTH]
                        for i in (0, 1)]
        self._sequences = [copy[:sd.WORD_LENGTH].cast("q") for copy in self._copies]
        self.header = self._read_header()

    @property
    def name(self) -> str:
        return self._region.name

    # -- lifecycle ----------------------------------------------------------------------------

    @classmethod
    def create(cls, cluster_id: str, role: str, name: str, interval: float) -> StatsPage:
        """Create the calling process's page (FileExistsError if it exists), not yet
        published; ValueError if role or name is too long."""
        require_store_order()
        role_bytes = sd.encode_name(role, sd.ROLE_LENGTH, "role")
        name_bytes = sd.encode_name(name, sd.PROCESS_NAME_LENGTH, "process name")
        pid, ticks = current_process()
        create_time = psutil.Process(pid).create_time()
        region = SharedRegion.create(stats_page_name(cluster_id, pid), sd.PAGE_SIZE)
        try:
            sd.HEADER.pack_into(region.buf, 0, 0, sd.LAYOUT_VERSION, sd.PAGE_SIZE,
                                float(interval), pid, ticks, create_time, 0, role_bytes,
                                name_bytes)
            with region.buf[:sd.HEADER_LENGTH].cast("q") as words:
                words[_MAGIC] = sd.MAGIC  # last: the page is ready
            return cls(region)
        except BaseException:
            region.unlink()
            region.close()
            raise

    @classmethod
    def open(cls, name: str) -> StatsPage:
        """Map the page ``name`` (FileNotFoundError if it does not exist or is not ready;
        ValueError if it is not a stats page of this layout)."""
        require_store_order()
        region = SharedRegion.open(name)
        try:
            if region.size != sd.PAGE_SIZE:
                raise ValueError(f"{name} is {region.size} bytes, a stats page "
                                 f"{sd.PAGE_SIZE}")
            magic, version = sd.HEADER.unpack_from(region.buf, 0)[:2]
            if magic == 0:
                raise FileNotFoundError(f"stats page {name} is not initialised yet")
            if magic != sd.MAGIC or version != sd.LAYOUT_VERSION:
                raise ValueError(f"{name} is not a stats page of layout {sd.LAYOUT_VERSION}:"
                                 f" magic {magic:#x}, version {version}")
            return cls(region)
        except BaseException:
            region.close()
            raise

    def close(self) -> None:
        """Drop this process's mapping; safe to call twice."""
        if self._buf is None:
            return
        for view in (*self._sequences, *self._copies, self._words):
            view.release()
        self._buf = None
        self._region.close()

    def unlink(self) -> None:
        """Remove the name (the owner's; mappings keep working); safe to call twice."""
        self._region.unlink()

    def __enter__(self) -> StatsPage:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writing (the owner's publisher thread) -----------------------------------------------

    def write(self, figures: PageFigures) -> None:
        """Publish ``figures`` into the copy readers are not reading, then make it current.
        ValueError (nothing written) if the counters or histograms do not fit."""
        check_counters(figures.counters, figures.histograms)
        index = 1 - self._words[_CURRENT]
        copy, sequence = self._copies[index], self._sequences[index]
        odd = sequence[0] + 1  # the only writer: the sequence is even between writes
        sequence[0] = odd
        sd.FIGURES.pack_into(
            copy, sd.FIGURES_OFFSET, figures.updated, figures.rss, figures.uss, figures.pss,
            figures.cpu_user, figures.cpu_system, figures.ctx_voluntary,
            figures.ctx_involuntary, figures.threads, len(figures.counters),
            len(figures.histograms))
        offset = sd.GC_OFFSET
        for gen in figures.gc:
            sd.GENERATION.pack_into(copy, offset, gen.collections, gen.collected,
                                    gen.uncollectable, gen.pause_total, gen.pause_max,
                                    *gen.pause_histogram)
            offset += sd.GENERATION.size
        offset = sd.COUNTERS_OFFSET
        for name, value in figures.counters.items():
            sd.COUNTER.pack_into(copy, offset, name.encode(), float(value))
            offset += sd.COUNTER.size
        offset = sd.HISTOGRAMS_OFFSET
        pad = sd.MAX_BOUNDS
        for name, hist in figures.histograms.items():
            n = len(hist.bounds)
            sd.HISTOGRAM.pack_into(copy, offset, name.encode(), n,
                                   *hist.bounds, *((0.0,) * (pad - n)),
                                   *hist.counts, *((0,) * (pad - n)),
                                   float(hist.total), float(hist.max))
            offset += sd.HISTOGRAM.size
        sequence[0] = odd + 1
        self._words[_CURRENT] = index

    # -- reading (any process) ----------------------------------------------------------------

    def _read_header(self) -> PageHeader:
        (_magic, _version, _size, interval, pid, ticks, create_time, _current, role,
         name) = sd.HEADER.unpack_from(self._buf, 0)
        return PageHeader(sd.decode_name(role), sd.decode_name(name), pid, ticks, create_time,
                          interval)

    def read(self) -> PageContents:
        """A consistent copy of the current figures (None before the first publish);
        TornPageError if none could be read in READ_ATTEMPTS attempts."""
        for attempt in range(READ_ATTEMPTS):
            index = self._words[_CURRENT]
            sequence = self._sequences[index]
            before = sequence[0]
            if before == 0:  # the current copy is only ever a written one
                return PageContents(self.header, None)
            if before % 2 == 0:
                data = bytes(self._copies[index])
                if sequence[0] == before:
                    return PageContents(self.header, _parse(data))
            if attempt >= 8:
                time.sleep(RETRY_SLEEP)
            else:
                os.sched_yield()
        raise TornPageError(f"no consistent copy of {self.name} in {READ_ATTEMPTS} attempts")


def _parse(data: bytes) -> PageFigures:
    (updated, rss, uss, pss, cpu_user, cpu_system, voluntary, involuntary, threads,
     counter_count, histogram_count) = sd.FIGURES.unpack_from(data, sd.FIGURES_OFFSET)
    gens = []
    offset = sd.GC_OFFSET
    for _ in range(3):
        values = sd.GENERATION.unpack_from(data, offset)
        gens.append(GenerationStats(values[0], values[1], values[2], values[3], values[4],
                                    tuple(values[5:])))
        offset += sd.GENERATION.size
    counters = {}
    for slot in range(min(counter_count, sd.MAX_COUNTERS)):
        name, value = sd.COUNTER.unpack_from(data, sd.COUNTERS_OFFSET + slot * sd.COUNTER.size)
        counters[sd.decode_name(name)] = value
    histograms = {}
    for slot in range(min(histogram_count, sd.MAX_HISTOGRAMS)):
        values = sd.HISTOGRAM.unpack_from(data, sd.HISTOGRAMS_OFFSET + slot * sd.HISTOGRAM.size)
        n = min(values[1], sd.MAX_BOUNDS)
        bounds = values[2:2 + sd.MAX_BOUNDS]
        counts = values[2 + sd.MAX_BOUNDS:3 + 2 * sd.MAX_BOUNDS]
        histograms[sd.decode_name(values[0])] = Histogram(
            tuple(bounds[:n]), tuple(counts[:n + 1]), values[-2], values[-1])
    return PageFigures(updated, rss, uss, pss, cpu_user, cpu_system, voluntary, involuntary,
                       threads, tuple(gens), counters, histograms)
