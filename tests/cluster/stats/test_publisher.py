"""The publisher: figures that move, sources, the registration count, RINGLOG_STATS=0, fork."""
from __future__ import annotations

import gc
import os
import time

import pytest

from cluster.stats import page_descriptor as sd, publisher
from cluster.stats.publisher import LatencyHistogram, process_stats
from cluster.stats.reader import list_pages, read_all
from shm_ring.naming import list_objects, stats_page_name
from tests.support.bounds import BOUND
from tests.support.processes import CTX

INTERVAL = 0.02


def newest(cluster_id, after):
    """This process's snapshot, first one published after ``after`` (epoch seconds)."""
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        mine = [s for s in read_all(cluster_id) if s.pid == os.getpid()]
        if mine and mine[0].updated > after:
            return mine[0]
        time.sleep(INTERVAL)
    raise AssertionError(f"no publish after {after}")


def test_figures_move_when_the_process_allocates_and_collects(cluster_id, publishing):
    held = process_stats(cluster_id, "producer", "p-1", interval=INTERVAL)
    try:
        before = newest(cluster_id, 0)
        assert (before.role, before.name, before.alive, before.stale) == \
            ("producer", "p-1", True, False)
        assert before.rss > 0 and before.threads >= 2 and before.cpu_user > 0
        ballast = bytearray(64 << 20)
        ballast[::4096] = b"x" * len(ballast[::4096])  # touch every page
        for _ in range(3):
            gc.collect()
        after = newest(cluster_id, time.time())
        assert after.rss >= before.rss + (48 << 20)
        assert after.gc[2].collections >= before.gc[2].collections + 3
        assert sum(after.gc[2].pause_histogram) == after.gc[2].collections
        assert after.gc[2].pause_max > 0
        del ballast
    finally:
        held.close()
    assert list_pages(cluster_id) == []


def test_sources_are_read_in_the_publisher_thread_and_added_up(cluster_id, publishing):
    first = process_stats(cluster_id, "producer", "p-1", interval=INTERVAL)
    second = process_stats(cluster_id, "consumer", "c-1", interval=INTERVAL)
    try:
        latency = LatencyHistogram(publisher.LATENCY_MS_BOUNDS)
        sent = {"n": 0}
        first.add_source(lambda: ({"record-send-total": sent["n"], "request-latency-max": 3},
                                  {"request-latency-ms:Produce": latency}))
        second.add_source(lambda: ({"record-send-total": 10, "request-latency-max": 7},
                                   {"request-latency-ms:Produce": latency}))
        sent["n"] = 5
        latency.record(0.3)
        latency.record(40.0)
        snapshot = newest(cluster_id, time.time())
        assert (snapshot.role, snapshot.name) == ("producer", "p-1")  # the first one's
        assert snapshot.counters == {"record-send-total": 15, "request-latency-max": 7}
        hist = snapshot.histograms["request-latency-ms:Produce"]
        assert hist.count == 4 and hist.max == 40.0 and hist.total == pytest.approx(80.6)
        assert hist.quantile(0.5) == 0.5
        first.close()  # its source goes, the page stays for the second
        first.close()
        assert newest(cluster_id, time.time()).counters["record-send-total"] == 10
    finally:
        first.close()
        second.close()
    assert list_objects(cluster_id) == []


def test_a_source_that_does_not_fit_is_refused_when_it_registers(cluster_id, publishing):
    held = process_stats(cluster_id, "broker", "broker-1", interval=INTERVAL)
    try:
        held.add_source(lambda: ({f"c{i}": 0 for i in range(sd.MAX_COUNTERS - 1)}, {}))
        with pytest.raises(ValueError, match="counters do not fit a stats page"):
            held.add_source(lambda: ({"x": 0, "y": 0}, {}))
        with pytest.raises(ValueError, match="counter name"):
            held.add_source(lambda: ({"n" * (sd.NAME_LENGTH + 1): 0}, {}))
        assert len(newest(cluster_id, time.time()).counters) == sd.MAX_COUNTERS - 1
    finally:
        held.close()


def test_a_declared_process_role_names_the_page(cluster_id, publishing):
    publisher.set_process_role("bridge", "bridge-a")
    held = process_stats(cluster_id, "producer", "p-1", interval=INTERVAL)
    try:
        snapshot = newest(cluster_id, 0)
        assert (snapshot.role, snapshot.name) == ("bridge", "bridge-a")
    finally:
        held.close()


def test_ringlog_stats_0_publishes_nothing(cluster_id, monkeypatch):
    monkeypatch.setenv(publisher.ENVIRONMENT_SWITCH, "0")
    held = process_stats(cluster_id, "producer", "p-1", interval=INTERVAL)
    held.add_source(lambda: ({"record-send-total": 1}, {}))
    assert held.page_name is None
    assert list_objects(cluster_id) == []
    held.close()


def forked_child(cluster_id, inherited, pipe):
    """Close the parent's registration inherited by fork, publish a page of our own."""
    inherited.close()
    own = process_stats(cluster_id, "consumer", "child", interval=INTERVAL)
    name = own.page_name
    pipe.send(name)
    own.close()
    pipe.send(os.path.exists("/dev/shm" + name))


@pytest.mark.multiprocess
def test_a_fork_child_never_touches_its_parents_page(cluster_id, publishing, spawn):
    held = process_stats(cluster_id, "producer", "parent", interval=INTERVAL)
    try:
        ours, theirs = CTX.Pipe()
        child = spawn(forked_child, cluster_id, held, theirs)
        assert ours.poll(BOUND)
        assert ours.recv() == stats_page_name(cluster_id, child.pid)
        assert ours.poll(BOUND)
        assert ours.recv() is False  # the child unlinked its own page
        child.join(BOUND)
        assert child.exitcode == 0
        assert list_pages(cluster_id) == [held.page_name]
        assert newest(cluster_id, time.time()).name == "parent"  # still published
    finally:
        held.close()


def test_a_failing_source_does_not_hide_the_others(cluster_id, publishing, caplog):
    held = process_stats(cluster_id, "producer", "p-1", interval=INTERVAL)
    try:
        broken = {"now": False}

        def flaky():
            if broken["now"]:
                raise RuntimeError("closed under us")
            return {"a-total": 1}, {}
        held.add_source(flaky)
        held.add_source(lambda: ({"b-total": 2}, {}))
        broken["now"] = True
        assert newest(cluster_id, time.time()).counters == {"b-total": 2}
        assert "source" in caplog.text and "closed under us" in caplog.text
    finally:
        held.close()
