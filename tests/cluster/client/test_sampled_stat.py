"""SampledStat: Kafka's windowed Rate, Avg and Max over a fake clock."""
from __future__ import annotations

import pytest

from cluster.client.sampled_stat import SampledStat
from tests.support.clock import FakeClock


def test_sampled_stats_forget_old_windows_and_do_not_overstate_young_rates():
    clock = FakeClock(100.0)
    stat = SampledStat(samples=2, window=10.0, clock=clock)
    stat.record(100)
    clock.now += 1
    assert stat.rate() == pytest.approx(100 / 10)  # at least one window's span
    assert stat.count_rate() == pytest.approx(1 / 10)
    stat.record(300)
    assert (stat.avg(), stat.max(), stat.lifetime_total, stat.lifetime_count) == (
        200, 300, 400, 2)
    clock.now += 25  # both samples have expired
    assert (stat.avg(), stat.max(), stat.rate(), stat.count_rate()) == (0, 0, 0, 0)
    assert (stat.lifetime_total, stat.lifetime_count) == (400, 2)


def test_a_rate_spans_the_live_samples_once_they_cover_more_than_the_minimum():
    clock = FakeClock(0.0)
    stat = SampledStat(samples=3, window=10.0, clock=clock)
    for _ in range(3):
        stat.record(60)
        clock.now += 10
    clock.now -= 5  # 25 s since the first sample began
    assert stat.rate() == pytest.approx(180 / 25)
    clock.now += 10  # the first sample (t=0) expires at t=30
    assert stat.rate() == pytest.approx(120 / 25)
    assert stat.max() == 60


def test_reading_does_not_change_what_later_readings_see():
    clock = FakeClock(0.0)
    stat = SampledStat(samples=2, window=10.0, clock=clock)
    stat.record(5)
    clock.now += 30
    assert stat.avg() == 0  # expired for the reader ...
    clock.now = 5  # ... and a reader never purged it (only the writer does)
    assert stat.avg() == 5


def test_record_many_gives_the_figures_of_as_many_records():
    clock = FakeClock(0.0)
    one_by_one = SampledStat(samples=2, window=10.0, clock=clock)
    at_once = SampledStat(samples=2, window=10.0, clock=clock)
    for values in ([5, 9, 1], [4], [2, 2]):
        for value in values:
            one_by_one.record(value)
        at_once.record_many(sum(values), len(values), max(values), clock.now)
        clock.now += 7  # the third group opens a new window; the first expires later
        figures = [(s.rate(), s.count_rate(), s.avg(), s.max(), s.lifetime_total,
                    s.lifetime_count) for s in (one_by_one, at_once)]
        assert figures[0] == figures[1]
