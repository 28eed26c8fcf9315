"""Committed ringlog records into Spark: the ``ringlog`` PySpark data source (batch and
streaming, Spark's Kafka source schema and options) and the process that runs a pipeline.

    from spark_bridge import get_spark
    spark = get_spark()          # local[2], ringlog registered
    df = spark.read.format("ringlog").option("bootstrap.servers", data_dir) \\
        .option("subscribe", "logs").load()

Names are imported on first use (PEP 562), so importing the package does not start pyspark.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "RinglogDataSource": "spark_bridge.source",
    "get_spark": "spark_bridge.session",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'spark_bridge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
