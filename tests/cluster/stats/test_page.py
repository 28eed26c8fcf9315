"""The stats page: layout round trip, limits, the two-copy seqlock under a writer in another
process, and a writer killed halfway."""
from __future__ import annotations

import os
import signal
import time

import posix_ipc
import pytest

from cluster.stats import page_descriptor as sd
from cluster.stats.page import PageFigures, StatsPage
from cluster.stats.reader import read_page
from cluster.stats.snapshot import GC_PAUSE_BOUNDS, GenerationStats, Histogram
from shm_ring.liveness import current_process
from shm_ring.naming import SharedRegion, stats_page_name
from tests.support.bounds import BOUND
from tests.support.processes import CTX
from tests.support.waits import wait_for


@pytest.fixture
def page(cluster_id):
    created = StatsPage.create(cluster_id, "broker", "broker-7", 0.5)
    yield created
    created.unlink()
    created.close()


def make_figures(n, counters=3, histograms=2):
    """Figures whose every number is derived from ``n``, so a mix of two writes shows."""
    buckets = len(GC_PAUSE_BOUNDS) + 1
    gens = tuple(GenerationStats(n + g, n * 2 + g, g, n / 8, n / 16, (n,) * buckets)
                 for g in range(3))
    return PageFigures(
        updated=float(n), rss=n * 4096, uss=n * 2048, pss=n * 3072, cpu_user=n / 4,
        cpu_system=n / 2, ctx_voluntary=n, ctx_involuntary=n + 1, threads=n % 7 + 1, gc=gens,
        counters={f"counter-{i}": float(n) for i in range(counters)},
        histograms={f"request-latency-ms:Api{i}": Histogram((1.0, 2.0 + i), (n, n, n),
                                                            float(n), float(n))
                    for i in range(histograms)})


def check_consistent(figures):
    n = figures.ctx_voluntary
    assert figures == make_figures(n, len(figures.counters), len(figures.histograms))
    return n


def test_layout_fits_one_page_and_names_follow_the_cluster():
    assert sd.HEADER.size <= sd.HEADER_LENGTH
    assert sd.copy_offset(1) + sd.COPY_LENGTH <= sd.PAGE_SIZE
    assert stats_page_name("c1", 42) == "/ringlog.c1.stats.42"


def test_header_says_who_the_process_is(page, cluster_id):
    pid, ticks = current_process()
    assert page.name == stats_page_name(cluster_id, pid)
    with StatsPage.open(page.name) as other:
        header = other.header
        assert (header.role, header.name, header.pid, header.start_ticks, header.interval) == \
            ("broker", "broker-7", pid, ticks, 0.5)
        assert abs(header.start_time - time.time()) < 3600 * 24 * 365
        assert other.read().figures is None  # nothing published yet


def test_round_trip_through_another_mapping(page):
    with StatsPage.open(page.name) as other:
        for n in (1, 2, 3):
            figures = make_figures(n, counters=sd.MAX_COUNTERS if n == 2 else 3,
                                   histograms=sd.MAX_HISTOGRAMS if n == 3 else 2)
            page.write(figures)
            assert other.read().figures == figures


def test_page_is_private_to_its_user(page):
    mode = os.stat("/dev/shm" + page.name).st_mode & 0o777
    assert mode == 0o600


@pytest.mark.parametrize("counters, histograms, message", [
    ({f"c{i}": 1 for i in range(sd.MAX_COUNTERS + 1)}, {}, "counters do not fit"),
    ({"x" * (sd.NAME_LENGTH + 1): 1}, {}, "counter name"),
    ({}, {f"h{i}": Histogram((1.0,), (0, 0), 0.0, 0.0) for i in range(sd.MAX_HISTOGRAMS + 1)},
     "histograms do not fit"),
    ({}, {"h": Histogram(tuple(range(sd.MAX_BOUNDS + 1)), (0,) * (sd.MAX_BOUNDS + 2), 0.0,
                         0.0)}, "bounds"),
])
def test_what_does_not_fit_is_refused_and_nothing_changes(page, counters, histograms,
                                                          message):
    page.write(make_figures(5))
    bad = PageFigures(**{**make_figures(6).__dict__, "counters": counters,
                         "histograms": histograms})
    with pytest.raises(ValueError, match=message):
        page.write(bad)
    assert page.read().figures == make_figures(5)


def test_a_write_torn_by_a_kill_leaves_the_last_complete_copy(page):
    page.write(make_figures(1))
    page.write(make_figures(2))
    current = page._words[sd.word_index(sd.CURRENT_COPY_OFFSET)]
    other = 1 - current
    # what a writer killed halfway through the third publish leaves: the other copy odd,
    # half written, the current-copy word not flipped
    page._sequences[other][0] += 1
    page._copies[other][16:64] = b"\xff" * 48
    with StatsPage.open(page.name) as reader:
        assert reader.read().figures == make_figures(2)


def test_open_refuses_missing_and_foreign_objects(cluster_id):
    name = stats_page_name(cluster_id, 1)
    with pytest.raises(FileNotFoundError):
        StatsPage.open(name)
    region = SharedRegion.create(name, sd.PAGE_SIZE)
    try:
        with pytest.raises(FileNotFoundError, match="not initialised"):
            StatsPage.open(name)
        region.buf[:8] = b"RINGLOG!"
        with pytest.raises(ValueError, match="is not a stats page"):
            StatsPage.open(name)
    finally:
        region.unlink()
        region.close()


def test_close_and_unlink_are_safe_twice(cluster_id):
    created = StatsPage.create(cluster_id, "producer", "p", 1.0)
    created.unlink()
    created.unlink()
    created.close()
    created.close()


# -- across processes --------------------------------------------------------------------------

def fast_writer(cluster_id, ready):
    """Publish as fast as possible, forever (the test kills it)."""
    page = StatsPage.create(cluster_id, "producer", "fast", 0.001)
    ready.set()
    n = 1
    while True:
        page.write(make_figures(n, counters=1 + n % 100, histograms=n % 40))
        n += 1


@pytest.mark.multiprocess
def test_a_reader_never_sees_a_torn_copy_and_a_killed_writer_leaves_a_readable_page(
        cluster_id, spawn):
    ready = CTX.Event()
    writer = spawn(fast_writer, cluster_id, ready)
    name = stats_page_name(cluster_id, writer.pid)
    try:
        assert ready.wait(BOUND)
        with StatsPage.open(name) as page:
            wait_for(lambda: page.read().figures is not None, "the first publish")
            seen = set()
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline or len(seen) < 20:
                assert time.monotonic() < deadline + BOUND
                seen.add(check_consistent(page.read().figures))
            os.kill(writer.pid, signal.SIGKILL)  # somewhere in a write, most likely
            writer.join(BOUND)
            last = check_consistent(page.read().figures)
            assert last >= max(seen)
            dead = read_page(name)
            assert (dead.alive, dead.stale, dead.role, dead.pid) == \
                (False, False, "producer", writer.pid)
    finally:
        if writer.is_alive():
            os.kill(writer.pid, signal.SIGKILL)
        writer.join(BOUND)
        try:
            posix_ipc.unlink_shared_memory(name)  # the killed writer could not
        except posix_ipc.ExistentialError:
            pass
