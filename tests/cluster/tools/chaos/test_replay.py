"""A failing run prints the command that replays it: the same seed, fault schedule and
workload (every default made explicit), into a new data directory and output folder."""
from __future__ import annotations

import argparse
import shlex

import pytest

from cluster.tools.chaos import command, run
from cluster.tools.chaos.checker import Verdict
from cluster.tools.chaos.history import History
from cluster.tools.chaos.schedule import build_copier_schedule, build_schedule
from cluster.tools.chaos.transactional_copy import CopyChaos


def parse(arguments):
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args(arguments)


@pytest.mark.parametrize("kind, extra", [
    (run.Chaos, ["--enable-idempotence", "--unkeyed"]),
    (CopyChaos, ["--workload", "transactional-copy", "--records", "500", "--zombies", "2"])])
def test_the_replay_arguments_make_the_same_run(tmp_path, kind, extra):
    args = parse(["--data-dir", str(tmp_path / "d"), "--scenario", "sigstop-leader",
                  "--duration", "45s", "--seed", "17", "--partitions", "4", *extra])
    chaos = kind(args)
    again = parse(chaos.replay_arguments())
    replayed = kind(again)
    assert again.data_dir == str(tmp_path / "d") + "-replay"
    assert replayed.out == chaos.out + "-replay"
    differ = {k for k in vars(args) if vars(args)[k] != vars(again)[k]}
    assert differ <= {"data_dir", "out", "kills", "copier_kills"}
    assert replayed.kills == chaos.kills == 4  # the default, one per 10 s, made explicit
    assert (build_schedule(again.scenario, again.seed, again.duration, replayed.kills,
                           again.partitions, 3)
            == build_schedule(args.scenario, args.seed, args.duration, chaos.kills,
                              args.partitions, 3))
    if kind is CopyChaos:
        assert replayed.copier_kills == chaos.copier_kills
        assert (build_copier_schedule(again.seed, again.duration, replayed.copier_kills,
                                      again.zombies, again.partitions)
                == build_copier_schedule(args.seed, args.duration, chaos.copier_kills,
                                         args.zombies, args.partitions))


def test_a_failing_run_prints_its_replay_command(tmp_path, capsys):
    args = parse(["--data-dir", str(tmp_path / "d"), "--scenario", "leader-kill-storm",
                  "--seed", "5", "--out", str(tmp_path / "out")])
    chaos = run.Chaos(args)
    (tmp_path / "out").mkdir()
    injector = argparse.Namespace(error=None)
    history = History(run={"scenario": "leader-kill-storm", "seed": 5, "partitions": 3})
    verdict = Verdict([{"kind": "lost", "producer": 0, "seq": 1}], [],
                      {"sent": 1, "acknowledged": 1, "failed": 0, "unknown": 0, "read": 0,
                       "drained": 0, "faults": 0})
    chaos._report(history, verdict, injector, settled=True)
    out = capsys.readouterr().out
    line = out.split("replay this run (same seed, same fault schedule) with:\n  ")[1]
    replay = shlex.split(line.splitlines()[0])
    assert replay[:2] == ["ringlog", "chaos"]
    assert parse(replay[2:]).seed == 5
    verdict.anomalies.clear()
    chaos.out = str(tmp_path / "out")
    chaos._report(history, verdict, injector, settled=True)
    assert "replay" not in capsys.readouterr().out

