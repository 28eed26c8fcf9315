"""The ringlog source in a Spark worker whose interpreter cannot run it (PYSPARK_PYTHON unset:
Spark's python3 from PATH, without pyarrow): ``load()`` fails with one line naming that
interpreter and how to set it, instead of ``count()`` crashing the workers (issue 22).
Spark builds the source in such a worker; here the test is that worker (pyarrow hidden)."""
from __future__ import annotations

import sys

import pytest

from spark_bridge.source import RinglogDataSource
from spark_bridge.worker_python import WorkerPythonError

OPTIONS = {"bootstrap.servers": "/nowhere", "subscribe": "logs"}


@pytest.mark.parametrize("configured", [None, "/usr/bin/python3"])
def test_a_worker_interpreter_without_pyarrow_is_named_at_load(monkeypatch, configured):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow: ImportError
    if configured is None:
        monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    else:
        monkeypatch.setenv("PYSPARK_PYTHON", configured)
    with pytest.raises(WorkerPythonError) as raised:
        RinglogDataSource(OPTIONS)
    message = str(raised.value)
    assert "\n" not in message
    assert (f"Spark's Python workers: their interpreter {sys.executable} (Python "
            f"{sys.version.split()[0]}; ") in message
    assert ("PYSPARK_PYTHON is not set, so Spark runs python3 from PATH" if configured is None
            else f"PYSPARK_PYTHON={configured})") in message
    assert "has no module named 'pyarrow'; start Spark with PYSPARK_PYTHON" in message
    assert "spark.pyspark.python" in message


def test_a_worker_that_can_run_the_source_builds_it():
    assert RinglogDataSource(OPTIONS).options == OPTIONS
