"""`make demo`'s Spark stage when it fails: Spark's error formats itself through the JVM,
which the demo stops before it reports, so the reason is taken while the JVM runs; and the
verdict line comes whatever the error (issue 22)."""
from __future__ import annotations

import pytest

from cluster.metadata import data_dir as dd
from cluster.tools.support import describe
from spark_bridge import demo


@pytest.mark.multiprocess
@pytest.mark.spark
def test_a_failed_spark_stage_says_why_once_spark_is_stopped(spark, tmp_path, monkeypatch,
                                                             capsys):
    from pyspark import SparkContext

    cluster_id = dd.ensure_cluster_id(str(tmp_path))  # a cluster that is not running
    monkeypatch.setattr(demo, "get_spark", lambda app_name: spark)
    # What stopping Spark does to its exceptions: their str() needs SparkContext._jvm.
    # (The session stays up for the other tests; monkeypatch puts _jvm back.)
    monkeypatch.setattr(demo.jvm, "stop_spark",
                        lambda session: monkeypatch.setattr(SparkContext, "_jvm", None))
    with pytest.raises(Exception) as raised:
        demo.spark_counts(str(tmp_path))
    assert SparkContext._jvm is None  # stopped, as far as the exception can tell
    assert describe(raised.value) == (
        f"the Spark stage failed: NoBrokersAvailable: cluster {cluster_id} in {tmp_path} is "
        f"not running (no broker process is alive); start it with: ringlog cluster start "
        f"--data-dir {tmp_path} --detach")
    assert "PYTHON_DATA_SOURCE_ERROR" in capsys.readouterr().err  # Spark's own text, first


def test_the_verdict_line_comes_when_the_error_cannot_say_what_it_is(monkeypatch, capsys):
    class Unprintable(Exception):
        def __str__(self):
            raise AssertionError("the JVM that formats me is gone")

    def run(args):
        raise Unprintable()

    monkeypatch.setattr(demo, "run", run)
    assert demo.main(["--data-dir", "unused"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "demo FAILED: Unprintable (its message could not be formatted)")
