"""The consumer-group workload's pieces without a cluster: its at-least-once check on
hand-made histories and on files (which drained records a member read), and its member
kills scheduled like copier kills."""
from __future__ import annotations

import json

import numpy as np

from cluster.tools.chaos import group_consume
from cluster.tools.chaos.history import History, load
from cluster.tools.chaos.schedule import build_copier_schedule


def read(partition, offset, value, c="drain"):
    return {"op": "read", "c": c, "partition": partition, "offset": offset, "value": value,
            "t": 1.0}


DRAIN = [read(0, 0, "p0:000000"), read(0, 1, "p0:000001"), read(1, 0, "p0:000002"),
         read(1, 1, "p0:000003")]


def kinds(found):
    return [a["kind"] for a in group_consume.check(found)[0]]


def test_every_record_below_the_committed_offsets_read_by_a_member_passes():
    found = History(drain_reads=DRAIN, members_read=np.ones(4, bool),
                    group={"caught_up": True, "committed": {0: 2, 1: 2}})
    anomalies, counts = group_consume.check(found)
    assert anomalies == [] and counts["drained_read_by_members"] == 4


def test_a_record_committed_past_but_never_read_is_unconsumed():
    found = History(drain_reads=DRAIN, members_read=np.array([True, False, True, False]),
                    group={"caught_up": True, "committed": {0: 2, 1: 1}})
    anomalies, _counts = group_consume.check(found)
    # partition 1's offset 1 was not read, but the group did not commit past it
    assert anomalies == [{"kind": "unconsumed", "partition": 0, "records": 1, "first": 1,
                          "committed": 2}]


def test_a_group_that_did_not_commit_the_end_is_incomplete():
    found = History(drain_reads=DRAIN, members_read=np.ones(4, bool),
                    group={"caught_up": False, "committed": {0: 2, 1: 1}})
    assert kinds(found) == ["group-incomplete"]


def test_load_marks_the_drained_records_members_read(tmp_path):
    files = {"drain.jsonl": DRAIN,
             "member-0.0.jsonl": [read(0, 0, "p0:000000", c=0),
                                  {"op": "commit", "c": 0, "offsets": {"0": 1}, "t": 2.0}],
             "member-0.1.jsonl": [read(1, 1, "p0:000003", c=0), read(1, 0, "x", c=0)]}
    for name, lines in files.items():
        (tmp_path / name).write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = load(tmp_path)
    assert found.drain_reads.rows()[0]["offset"] == 0
    order = [(r["partition"], r["offset"]) for r in found.drain_reads.rows()]
    assert [order[n] for n in np.flatnonzero(found.members_read)] == [(0, 0), (1, 1)]
    assert len(found.member_commits) == 1
    assert len(found.reads) == 1  # the read of another value at (1, 0) is kept
    found.group = {"caught_up": True, "committed": {0: 1, 1: 2}}
    assert [(a["kind"], a["partition"], a["first"]) for a in
            group_consume.check(found)[0]] == [("unconsumed", 1, 0)]


def test_member_kills_are_scheduled_as_copier_kills_without_aims():
    steps = build_copier_schedule(3, 60.0, 5, 0, 3, kill="member-kill", aims=(None,))
    assert [s.fault for s in steps] == ["member-kill"] * 5
    assert {s.aim for s in steps} == {None} and {s.copier for s in steps} <= {0, 1, 2}
    assert steps == build_copier_schedule(3, 60.0, 5, 0, 3, kill="member-kill",
                                          aims=(None,))
