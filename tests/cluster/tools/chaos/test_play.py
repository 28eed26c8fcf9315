"""The command plays every fault it scheduled: a run whose steps ran late (each waits for
what it restarted) goes on until they are all played, within a bound, and says so; past
the bound it says how many were played and why not all. Fake brokers, no processes."""
from __future__ import annotations

import argparse
import time

from cluster.tools.chaos import run
from cluster.tools.chaos.faults import FaultInjector
from cluster.tools.chaos.history import read_lines
from cluster.tools.chaos.schedule import build_schedule
from cluster.tools.chaos.workload import HistoryWriter
from tests.cluster.tools.chaos.test_faults import FakeBrokers, image


class SlowInjector(FaultInjector):
    """Each leader kill takes ``STEP`` seconds (a restart that takes its time)."""

    STEP = 0.15

    def _leader_kill_storm(self, step, stop):
        self._record("kill", step, broker=0)
        time.sleep(self.STEP)


class HealedBrokers(FakeBrokers):
    def heal(self):
        return []


def play(tmp_path, duration, kills):
    args = argparse.Namespace(data_dir=str(tmp_path), out=str(tmp_path / "out"),
                              scenario="leader-kill-storm", seed=1, kills=kills,
                              duration=duration)
    chaos = run.Chaos(args)
    chaos.brokers = HealedBrokers()
    chaos.fault_log = HistoryWriter(tmp_path / "faults.jsonl")
    schedule = build_schedule("leader-kill-storm", 1, duration, kills, 1, 3)
    injector = SlowInjector(schedule, chaos.brokers, lambda: image([(0, [0, 1, 2])]), "t",
                            str(tmp_path), chaos.fault_log)
    started = time.monotonic()
    chaos._play(injector)
    chaos.fault_log.close()
    kills_done = [f for f in read_lines(tmp_path / "faults.jsonl") if f["fault"] == "kill"]
    return chaos.played, len(kills_done), time.monotonic() - started


def test_a_run_whose_faults_ran_late_is_extended_until_all_are_played(tmp_path, capsys):
    played, kills, _took = play(tmp_path, duration=0.6, kills=6)  # 0.9 s of steps
    assert played["scheduled"] == played["played"] == kills == 6
    assert played["extended_by"] > 0
    assert "faults still to play after 0.6 s" in capsys.readouterr().out


def test_a_run_extended_to_its_bound_says_how_many_faults_were_played(tmp_path, capsys):
    played, kills, _took = play(tmp_path, duration=0.3, kills=10)  # 1.5 s of steps
    assert played["scheduled"] == 10 and played["played"] == kills < 10
    out = capsys.readouterr().out
    assert f"{kills} of 10 faults played; the other {10 - kills} were still due" in out
