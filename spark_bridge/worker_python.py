"""Whether Spark's Python workers can run the ringlog source: their interpreter must import
pyarrow and the ringlog packages the read path uses.

Spark runs a Python data source in its Python workers, not in the driver: ``schema()`` at
``load()`` (``pyspark.sql.worker.create_data_source``), ``partitions()`` and ``read()`` when
the query runs — and the planning worker imports pyarrow before any of the source's code
(``plan_data_source_read``), so a worker interpreter without it crashed at ``count()`` with
"Python worker exited unexpectedly". The workers run ``PYSPARK_PYTHON`` (or the setting
``spark.pyspark.python``), else ``python3`` from PATH — often not the virtualenv the driver
runs in. ``check()`` runs where Spark builds the source at ``load()``, in the same kind of
worker, and fails there with one line naming that interpreter and how to set it.

Why not set the workers' interpreter instead: Spark reads it when the SparkContext starts,
in the driver, before any code of the source runs; ``spark_bridge.get_spark`` does set it
(to the driver's own interpreter) for the sessions it makes.
"""
from __future__ import annotations

import importlib
import os
import sys

#: What the read path imports in a worker: Arrow (PySpark's planner and ``arrow_rows``) and
#: the partition reader, which brings the consumer.
REQUIRED = ("pyarrow", "spark_bridge.partition_reader", "consumer_proc.consumer")


class WorkerPythonError(RuntimeError):
    """Spark's Python workers run an interpreter the ringlog source cannot run in."""


def check():
    """WorkerPythonError naming this interpreter (a Spark worker's, when called by the
    source) and the module it lacks, unless it imports everything in REQUIRED."""
    for module in REQUIRED:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise WorkerPythonError(message(exc)) from None


def message(exc):
    """The one line for an ImportError ``exc`` of this interpreter."""
    what = (f"has no module named {exc.name!r}" if isinstance(exc, ModuleNotFoundError)
            else f"cannot import it: {exc}")
    configured = os.environ.get("PYSPARK_PYTHON")
    source = (f"PYSPARK_PYTHON={configured}" if configured else
              "PYSPARK_PYTHON is not set, so Spark runs python3 from PATH")
    return (f"the ringlog source cannot run in Spark's Python workers: their interpreter "
            f"{sys.executable} (Python {sys.version.split()[0]}; {source}) {what}; start "
            f"Spark with PYSPARK_PYTHON (or the setting spark.pyspark.python) naming an "
            f"interpreter that has ringlog installed, e.g. the driver's: export "
            f"PYSPARK_PYTHON=/path/to/venv/bin/python")
