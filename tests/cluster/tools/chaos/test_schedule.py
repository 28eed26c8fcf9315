"""The fault schedule: a pure function of its seed, spread over the run."""
from __future__ import annotations

import pytest

from cluster.tools.chaos.schedule import (
    COPIER_DOWNTIME,
    DOWNTIME,
    SCENARIOS,
    build_copier_schedule,
    build_schedule,
    choose,
)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_same_seed_gives_the_same_schedule(scenario):
    first = build_schedule(scenario, 7, 60.0, 6, 3, 3)
    assert first == build_schedule(scenario, 7, 60.0, 6, 3, 3)
    assert first != build_schedule(scenario, 8, 60.0, 6, 3, 3)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_steps_are_spread_over_the_run_within_their_bounds(scenario):
    steps = build_schedule(scenario, 3, 60.0, 6, 4, 3)
    assert [s.number for s in steps] == list(range(6))
    low, high = DOWNTIME[scenario]
    for step in steps:
        assert step.number * 10.0 <= step.at <= step.number * 10.0 + 5.0
        assert 0 <= step.partition < 4 and 0.0 <= step.pick < 1.0
        assert low <= step.downtime <= high
        assert step.scenario == scenario


def test_rolling_sigterm_goes_round_the_brokers():
    steps = build_schedule("rolling-sigterm", 1, 30.0, 5, 2, 3)
    assert [s.broker for s in steps] == [0, 1, 2, 0, 1]
    assert {s.broker for s in build_schedule("leader-kill-storm", 1, 30.0, 5, 2, 3)} == {-1}


def test_no_kills_is_an_empty_schedule():
    assert build_schedule("sigstop-leader", 1, 30.0, 0, 2, 3) == ()


@pytest.mark.parametrize("args", [("no-such", 1, 10.0, 1, 1, 1), ("divergence", 1, 0, 1, 1, 1),
                                  ("divergence", 1, 10.0, -1, 1, 1),
                                  ("divergence", 1, 10.0, 1, 0, 1)])
def test_bad_arguments_are_refused(args):
    with pytest.raises(ValueError):
        build_schedule(*args)


def test_choose_picks_by_position_among_sorted_candidates():
    assert choose([2, 0, 1], 0.0) == 0
    assert choose([2, 0, 1], 0.5) == 1
    assert choose([2, 0, 1], 0.99) == 2
    assert choose([], 0.5) is None


def test_a_copier_schedule_mixes_its_kills_and_zombies_over_the_run_from_its_seed():
    steps = build_copier_schedule(5, 60.0, 4, 2, 3)
    assert steps == build_copier_schedule(5, 60.0, 4, 2, 3)
    assert steps != build_copier_schedule(6, 60.0, 4, 2, 3)
    assert sorted(s.fault for s in steps) == ["copier-kill"] * 4 + ["zombie"] * 2
    low, high = COPIER_DOWNTIME
    for step in steps:
        assert step.number * 10.0 <= step.at <= step.number * 10.0 + 5.0
        assert 0 <= step.copier < 3 and low <= step.downtime <= high
    assert build_copier_schedule(5, 60.0, 0, 0, 3) == ()


@pytest.mark.parametrize("args", [(1, 0, 1, 1, 1), (1, 10.0, -1, 1, 1), (1, 10.0, 1, -1, 1),
                                  (1, 10.0, 1, 1, 0)])
def test_bad_copier_schedule_arguments_are_refused(args):
    with pytest.raises(ValueError):
        build_copier_schedule(*args)
