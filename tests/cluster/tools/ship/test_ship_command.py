"""``ringlog ship``'s command line: bad arguments and a damaged checkpoint fail at once with
a message naming the bad value (exit 1), before any producer is built."""
from __future__ import annotations

from cluster.tools.ship import command
from tests.support.tools import run_tool


def ship(tmp_path, *argv):
    return run_tool(command, "--bootstrap-server", tmp_path, "--topic", "logs", "--path",
                    tmp_path / "*.log", "--checkpoint", tmp_path / "ckpt", *argv)


def test_unknown_key_field_is_refused(tmp_path, capsys):
    assert ship(tmp_path, "--key", "{pod}") == 1
    assert "unknown field {pod}" in capsys.readouterr().err


def test_line_longer_than_a_request_is_refused(tmp_path, capsys):
    assert ship(tmp_path, "--max-line-bytes", "2000000") == 1
    assert "--max-line-bytes 2000000 does not fit" in capsys.readouterr().err


def test_damaged_checkpoint_is_refused_and_kept(tmp_path, capsys):
    (tmp_path / "ckpt").write_bytes(b"ringlog-ship-checkpoint 1 00000000\n{}")
    assert ship(tmp_path) == 1
    assert "is damaged: stored CRC 00000000" in capsys.readouterr().err
    assert (tmp_path / "ckpt").read_bytes().startswith(b"ringlog-ship-checkpoint")
