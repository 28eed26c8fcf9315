"""The chaos timeline's contents: the copiers' events it draws, and a timeline with
unavailability windows and copier events drawn (issue 22: both panels were empty)."""
from __future__ import annotations

from cluster.tools.chaos import report
from cluster.tools.chaos.checker import check
from cluster.tools.chaos.history import History


def copy_history():
    faults = [
        {"fault": "copier-start", "c": 0, "i": 0, "pid": 11, "t": 1.0},
        {"fault": "copier-start", "c": 1, "i": 0, "pid": 12, "t": 1.0},
        {"fault": "kill", "broker": 0, "partition": 0, "pid": 5, "t": 2.0},
        {"fault": "copier-kill", "c": 0, "i": 0, "pid": 11, "aim": "in-txn", "hit": True,
         "t": 3.0},
        {"fault": "copier-exit", "c": 0, "i": 0, "pid": 11, "exitcode": -9, "t": 3.1},
        {"fault": "copier-start", "c": 0, "i": 1, "pid": 13, "t": 4.0},
        {"fault": "zombie", "c": 1, "i": 1, "pid": 14, "zombie": 0, "t": 5.0},
        {"fault": "copier-exit", "c": 1, "i": 0, "pid": 12, "exitcode": 1, "t": 5.5},
        {"fault": "start", "broker": 0, "partition": 0, "pid": 6, "t": 6.0}]
    ops = [{"op": "invoke", "p": 0, "seq": 0, "t": 1.5},
           {"op": "ok", "p": 0, "seq": 0, "t": 1.6, "partition": 0, "offset": 0},
           {"op": "invoke", "p": 0, "seq": 1, "t": 2.4},
           {"op": "ok", "p": 0, "seq": 1, "t": 2.5, "partition": 0, "offset": 1}]
    return History(
        ops=ops, faults=faults,
        leadership=[{"t": 0.5, "partition": 0, "leader": 0, "epoch": 0, "isr": [0, 1]},
                    {"t": 2.05, "partition": 0, "leader": 1, "epoch": 1, "isr": [1]}],
        copier_ops=[{"op": "fenced", "c": 1, "i": 0, "txn": 3, "error": "ProducerFencedError",
                     "t": 5.2}],
        run={"start": 0.0, "end": 8.0, "partitions": 2, "scenario": "leader-kill-storm",
             "seed": 1})


def test_copier_events_are_restarts_kills_zombies_fencings_and_exits_on_errors():
    # The first incarnations' starts are the set-up; the killed incarnation's exit is its kill.
    assert report.copier_events(copy_history()) == [
        ("copier-kill", 3.0, 0), ("copier-start", 4.0, 0), ("zombie", 5.0, 1),
        ("fenced", 5.2, 1), ("copier-exit", 5.5, 1)]


def test_the_timeline_draws_the_windows_and_the_copiers(tmp_path):
    history = copy_history()
    verdict = check(history)
    assert [(w["partition"], w["start"], w["end"]) for w in verdict.windows] == [(0, 2.0, 2.5)]
    path = report.write_timeline(tmp_path, history, verdict)
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
