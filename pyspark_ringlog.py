"""The ``ringlog`` data source as PySpark finds installed ones: ``DefaultSource``.

PySpark 4 registers, in every session, each Python data source exposed as ``DefaultSource``
(a ``DataSource`` subclass, registered under its ``name()``) by an importable top-level
module whose name starts with ``pyspark_`` (``pyspark/sql/worker/lookup_data_sources.py``:
``pkgutil.iter_modules()`` in a Python worker, on Spark's first data-source lookup). So
``SparkSession.builder.getOrCreate()`` then ``spark.read.format("ringlog")`` works without
registering anything, as the Kafka source does.

Why a top-level file: PySpark looks only at top-level module names, and ringlog's packages
are fixed; this module only re-exports ``spark_bridge.source``. setup.cfg installs it (a
regular install puts it in site-packages; an editable one puts the checkout on ``sys.path``,
as ``pkgutil`` cannot list modules served by setuptools' editable finder).
"""
from __future__ import annotations

from spark_bridge.source import RinglogDataSource as DefaultSource

__all__ = ["DefaultSource"]
