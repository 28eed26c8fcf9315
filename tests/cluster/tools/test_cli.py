"""The `ringlog` command line routes to each tool with Kafka's flags."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from cluster.errors import KafkaConfigurationError, UnknownTopicOrPartitionError
from cluster.tools.cli import main
from cluster.tools.support import FAILED, Terminated, ToolError, fail, signals_deferred
from segments.log import PartitionLog
from segments.record.records import RecordBatchBuilder


def write_log(path, batches=3, per_batch=4):
    log = PartitionLog(path)
    for i in range(batches):
        builder = RecordBatchBuilder()
        for j in range(per_batch):
            builder.append(1_700_000_000_000 + j, b"k%d" % j, b"value-%d-%d" % (i, j))
        log.append(builder.build())
    log.close()


def test_dump_log_prints_batches_and_records(tmp_path, capsys):
    write_log(tmp_path / "t-0")
    segment = tmp_path / "t-0" / ("0" * 20 + ".log")
    assert main(["dump-log", "--files", str(segment), "--print-data-log"]) == 0
    out = capsys.readouterr().out
    assert f"Dumping {segment}" in out
    assert out.count("baseOffset:") == 3
    assert "| offset: 11 CreateTime: 1700000000003 keySize: 2 valueSize: 9" in out
    assert "payload: value-2-3" in out


@pytest.mark.multiprocess
def test_console_script_help_lists_the_tools():
    out = subprocess.run([sys.executable, "-m", "cluster.tools.cli", "--help"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "dump-log" in out


def test_unknown_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["dump-log", "--files", "x.log", "--no-such-flag"])
    assert exit_.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err


def test_a_failed_tool_says_the_error_class_once(capsys):
    assert fail(KafkaConfigurationError("acks must be 0, 1 or all, found '2'")) == FAILED
    assert fail(UnknownTopicOrPartitionError("topic 'x'"), "Error while executing : ") == FAILED
    assert fail(ToolError("--topic must be specified")) == FAILED
    assert capsys.readouterr().err.splitlines() == [
        "KafkaConfigurationError: acks must be 0, 1 or all, found '2'",
        "Error while executing : UnknownTopicOrPartitionError: [Error 3] topic 'x'",
        "--topic must be specified"]


@pytest.mark.parametrize(("sig", "raised"), [(signal.SIGINT, KeyboardInterrupt),
                                             (signal.SIGTERM, Terminated)])
def test_a_signal_during_a_tools_stop_is_raised_once_the_stop_is_done(sig, raised):
    came, finished = [], []
    with pytest.raises(raised):
        with signals_deferred(came.append):
            os.kill(os.getpid(), sig)  # a second Ctrl-C while the tool stops
            os.kill(os.getpid(), sig)
            finished.append(True)  # the stop goes on to its end
    assert came == [sig, sig] and finished == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
