"""What an aimed copier kill looks at: the op of the last whole line of a copier's
history, with a line still being written (or cut by the read's start) left out."""
from __future__ import annotations

from cluster.tools.chaos.copiers import TAIL, last_op


def test_the_last_whole_line_names_the_op(tmp_path):
    path = tmp_path / "copier-0.0.jsonl"
    assert last_op(path) is None  # no file yet
    path.write_text("")
    assert last_op(path) is None
    path.write_text('{"op":"init"}\n{"op":"begin","txn":0}\n')
    assert last_op(path) == "begin"
    path.write_text('{"op":"init"}\n{"op":"begin","txn":0}\n{"op":"commit-inv')
    assert last_op(path) == "begin"  # the last line is being written


def test_a_line_longer_than_the_tail_read_names_no_op(tmp_path):
    path = tmp_path / "copier-0.0.jsonl"
    path.write_text('{"op":"begin","pad":"' + "x" * TAIL + '"}\n')
    assert last_op(path) is None
