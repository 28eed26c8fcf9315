"""Rows of ``ringlog top``: gauges from the newest snapshot, rates from two publishes of
one process divided by the time between the publishes."""
from __future__ import annotations

import pytest

from cluster.tools.observe.rows import RateTracker, row, rows, sort_rows
from tests.support.snapshots import generation, snapshot


def test_a_single_snapshot_gives_gauges_and_no_rates():
    found = row(snapshot(gc=(generation(10, [0.0002] * 10), generation(2, [0.002, 0.004]),
                             generation(1, [0.05])),
                         counters={"records-in-total": 500.0, "records-lag-max": 7.0}))
    assert (found.role, found.name, found.pid, found.state) == ("broker", "broker-0", 1000,
                                                                "alive")
    assert found.rss == 50 << 20 and found.uss == 40 << 20
    assert found.gc_collections == (10, 2, 1)
    assert found.gc_pause_max == pytest.approx(0.05)
    assert found.gc_pause_total == pytest.approx(0.002 + 0.006 + 0.05)
    # 13 pauses: the 99th percentile falls in the bucket of the longest one
    assert found.gc_pause_p99 == pytest.approx(0.05)
    assert found.records_in == 500.0 and found.records_out is None and found.lag == 7.0
    assert found.cpu_percent is None and found.records_in_per_s is None
    assert found.gc_collections_per_s is None


def test_rates_divide_by_the_time_between_the_two_publishes():
    before = snapshot(updated=100.0, cpu_user=1.0, cpu_system=1.0, ctx_voluntary=10,
                           gc=(generation(4), generation(1), generation(0)),
                           counters={"records-in-total": 1000.0, "record-send-total": 0.0})
    after = snapshot(updated=102.0, cpu_user=1.5, cpu_system=1.5, ctx_voluntary=30,
                          gc=(generation(14, [0.001] * 10), generation(3), generation(1)),
                          counters={"records-in-total": 5000.0, "record-send-total": 200.0})
    found = row(after, before)
    assert found.cpu_percent == pytest.approx(50.0)
    assert found.ctx_voluntary_per_s == pytest.approx(10.0)
    assert found.gc_collections_per_s == pytest.approx((5.0, 1.0, 0.5))
    assert found.gc_pause_share == pytest.approx(0.005)
    assert found.records_in_per_s == pytest.approx(2000.0)
    assert found.records_out_per_s == pytest.approx(100.0)


def test_counters_a_role_lacks_have_no_rate():
    before = snapshot(updated=1.0)
    after = snapshot(updated=2.0, counters={"records-in-total": 10.0})
    found = row(after, before)
    assert found.records_in_per_s is None and found.cpu_percent is not None


def test_rates_need_two_snapshots_of_one_process():
    with pytest.raises(ValueError, match="two snapshots of one process"):
        row(snapshot(pid=2), snapshot(pid=3))
    # the same pid started again is another process
    with pytest.raises(ValueError):
        row(snapshot(start_time=2.0), snapshot(start_time=1.0))


@pytest.mark.parametrize("alive, stale, state", [(True, False, "alive"), (True, True, "stale"),
                                                 (False, False, "dead"), (False, True, "dead")])
def test_state(alive, stale, state):
    assert row(snapshot(alive=alive, stale=stale)).state == state


def test_rows_pair_each_process_with_its_earlier_snapshot():
    earlier = [snapshot(pid=1, updated=1.0, cpu_user=0.0, cpu_system=0.0)]
    now = [snapshot(pid=1, updated=2.0, cpu_user=0.25, cpu_system=0.0),
           snapshot(pid=2, updated=2.0)]
    first, second = rows(now, earlier)
    assert first.cpu_percent == pytest.approx(25.0) and second.cpu_percent is None


def test_the_tracker_keeps_rates_over_a_read_between_publishes():
    tracker = RateTracker()
    tracker.update([snapshot(updated=1.0, cpu_user=0.0, cpu_system=0.0)])
    [moved] = tracker.update([snapshot(updated=2.0, cpu_user=0.5, cpu_system=0.0)])
    assert moved.cpu_percent == pytest.approx(50.0)
    # read again before the next publish: the rates stay, the state is the newest read's
    [again] = tracker.update([snapshot(updated=2.0, cpu_user=0.5, cpu_system=0.0,
                                            alive=False)])
    assert again.cpu_percent == pytest.approx(50.0) and again.state == "dead"
    # a process whose page is gone is forgotten: seen again, it has no rates yet
    tracker.update([])
    [back] = tracker.update([snapshot(updated=3.0)])
    assert back.cpu_percent is None


def test_missing_rates_names_live_processes_seen_once():
    tracker = RateTracker()
    seen = [snapshot(pid=1, updated=1.0), snapshot(pid=2, alive=False)]
    tracker.update(seen)
    assert [s.pid for s in tracker.missing_rates(seen)] == [1]


def test_sort_by_role_and_by_figures():
    found = rows([snapshot(role="producer", name="p", pid=3, rss=10),
                  snapshot(role="broker", name="broker-1", pid=2, rss=30),
                  snapshot(role="broker", name="broker-0", pid=1, rss=20)])
    assert [r.pid for r in sort_rows(found)] == [1, 2, 3]
    assert [r.pid for r in sort_rows(found, "rss")] == [2, 1, 3]
    assert [r.pid for r in sort_rows(found, "pid")] == [1, 2, 3]
