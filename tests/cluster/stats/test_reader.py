"""The reader across processes: a stopped process is stale, a killed one dead but its page
still readable until a read of every page (read_all) or reap_dead removes it; only the pages
of dead processes are removed."""
from __future__ import annotations

import os
import signal
import time

import pytest

from cluster.stats.publisher import process_stats
from cluster.stats.reader import list_pages, read_all, read_page, reap_dead
from shm_ring.naming import cleanup_stale, stats_page_name
from tests.support.bounds import BOUND
from tests.support.processes import CTX

INTERVAL = 0.05


def publishing_child(cluster_id, ready):
    held = process_stats(cluster_id, "chaos-producer", "worker", interval=INTERVAL)
    held.add_source(lambda: ({"records-out-total": 7}, {}))
    ready.set()
    while True:
        time.sleep(1)


def wait_for_snapshot(cluster_id, pid, condition, what):
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        found = [s for s in read_all(cluster_id) if s.pid == pid]
        if found and condition(found[0]):
            return found[0]
        time.sleep(INTERVAL / 2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.multiprocess
def test_stopped_is_stale_killed_is_dead_and_only_dead_pages_are_reaped(
        cluster_id, publishing, spawn):
    ready = CTX.Event()
    child = spawn(publishing_child, cluster_id, ready)
    assert ready.wait(BOUND)
    name = stats_page_name(cluster_id, child.pid)
    try:
        live = wait_for_snapshot(cluster_id, child.pid, lambda s: s.counters,
                                 "a publish with the source's figures")
        assert (live.role, live.name, live.alive, live.stale) == \
            ("chaos-producer", "worker", True, False)
        assert live.counters == {"records-out-total": 7}
        assert reap_dead(cluster_id) == []
        assert cleanup_stale(cluster_id) == []  # a live process's page stays
        os.kill(child.pid, signal.SIGSTOP)
        stopped = wait_for_snapshot(cluster_id, child.pid, lambda s: s.stale, "stale")
        assert stopped.alive
        os.kill(child.pid, signal.SIGCONT)
        wait_for_snapshot(cluster_id, child.pid, lambda s: not s.stale, "fresh again")
        os.kill(child.pid, signal.SIGKILL)
        child.join(BOUND)
        assert list_pages(cluster_id) == [name]  # nobody unlinked it
        dead = read_page(name)  # still readable, and known dead
        assert (dead.alive, dead.stale, dead.counters) == \
            (False, False, {"records-out-total": 7})
        assert reap_dead(cluster_id) == [name]
        assert list_pages(cluster_id) == []
    finally:
        if child.is_alive():
            os.kill(child.pid, signal.SIGKILL)
            child.join(BOUND)
        reap_dead(cluster_id)


@pytest.mark.multiprocess
def test_every_read_leaves_out_and_unlinks_the_pages_of_dead_processes(
        cluster_id, publishing, spawn):
    """``ringlog top`` / ``metrics`` / ``profile`` read with read_all: a process gone
    without unlinking its page (SIGKILL; a Spark worker's os._exit) is not shown beside
    the live ones, and its page does not pile up until the cluster stops (issue 22)."""
    ready = [CTX.Event(), CTX.Event()]
    children = [spawn(publishing_child, cluster_id, event) for event in ready]
    try:
        assert all(event.wait(BOUND) for event in ready)
        for child in children:
            wait_for_snapshot(cluster_id, child.pid, lambda s: s.counters, "a publish")
        os.kill(children[0].pid, signal.SIGKILL)
        children[0].join(BOUND)
        assert [s.pid for s in read_all(cluster_id)] == [children[1].pid]
        assert list_pages(cluster_id) == [stats_page_name(cluster_id, children[1].pid)]
    finally:
        for child in children:
            if child.is_alive():
                os.kill(child.pid, signal.SIGKILL)
                child.join(BOUND)
        reap_dead(cluster_id)
