"""Where a stopped bridge's query stands (``spark_bridge.checkpoint_log``, read from Spark's
offset and commit logs) and the line the bridge prints on Ctrl-C or SIGTERM: the last
committed batch, its end offsets, and the command that resumes."""
from __future__ import annotations

import argparse
import shlex

import pytest

from spark_bridge import command as spark_bridge_cmd
from spark_bridge.bridge import stop_line
from spark_bridge.checkpoint_log import Progress, read_progress


def write_batch(checkpoint, batch_id, offsets_json, committed):
    """Spark's files for one micro-batch: offsets/<id> (and commits/<id> when committed),
    with the hidden .crc files Hadoop writes beside them."""
    for kind in ("offsets", "commits"):
        (checkpoint / kind).mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch_id)).write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n' + offsets_json)
    (checkpoint / "offsets" / f".{batch_id}.crc").write_bytes(b"crc")
    if committed:
        (checkpoint / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_progress_of_a_new_checkpoint(tmp_path):
    assert read_progress(tmp_path / "none") == Progress(None, None, None)
    write_batch(tmp_path, 0, '{"t":{"0":5}}', committed=False)
    assert read_progress(tmp_path) == Progress(None, None, 0)


def test_progress_is_the_last_committed_batch_and_its_end_offsets(tmp_path):
    for batch_id in range(11):  # 10 after 9: by number, not by name
        write_batch(tmp_path, batch_id, f'{{"t":{{"0":{batch_id * 10},"1":7}}}}',
                    committed=True)
    write_batch(tmp_path, 11, '{"t":{"0":999,"1":7}}', committed=False)
    assert read_progress(tmp_path) == Progress(10, {"t": {"0": 100, "1": 7}}, 11)


def test_a_damaged_offsets_file_is_named(tmp_path):
    write_batch(tmp_path, 3, "", committed=True)
    with pytest.raises(ValueError, match=r"offsets/3: expected Spark's offsets file"):
        read_progress(tmp_path)


@pytest.mark.parametrize("progress, where", [
    (Progress(None, None, None), "stopped before any micro-batch was committed"),
    (Progress(None, None, 0), "stopped before any micro-batch was committed (batch 0 was "
                              "interrupted: it runs again first)"),
    (Progress(4, {"t": {"0": 40}}, 4), 'stopped after batch 4, committed up to offsets '
                                       '{"t":{"0":40}}'),
    (Progress(4, {"t": {"0": 40}}, 5), 'stopped after batch 4, committed up to offsets '
                                       '{"t":{"0":40}} (batch 5 was interrupted: it runs '
                                       'again first)'),
])
def test_stop_line_says_where_and_what_to_run(progress, where):
    assert stop_line(progress, "ringlog spark-bridge X") == (
        f"spark-bridge: {where}; resume with: ringlog spark-bridge X")


def parse(argv):
    parser = argparse.ArgumentParser()
    spark_bridge_cmd.add_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize("extra", [
    [],
    ["--available-now", "--starting-offsets", '{"t":{"0":2}}', "--master", "local[1]"],
    ["--trigger", "1s", "--transform", "m:f", "--max-offsets-per-trigger", "10",
     "--fail-on-data-loss", "false", "--conf", "a=b c", "--conf", "d=e"],
])
def test_resume_command_runs_the_same_bridge_on_the_same_checkpoint(tmp_path, monkeypatch,
                                                                    extra):
    monkeypatch.chdir(tmp_path)
    argv = ["--bootstrap-server", "data dir", "--topic", "t", "--sink", "parquet:out",
            "--checkpoint", "ck", *extra]
    command = spark_bridge_cmd.resume_command(parse(argv))
    words = shlex.split(command)
    assert words[:2] == ["ringlog", "spark-bridge"]
    again, given = vars(parse(words[2:])), vars(parse(argv))
    assert again == {**given, "checkpoint": str(tmp_path / "ck")}
    assert "--master" not in words or "local[1]" in extra
