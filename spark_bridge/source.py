"""The ``ringlog`` PySpark Python Data Source: ``spark.read.format("ringlog")`` and
``spark.readStream.format("ringlog")``; ``df.write.format("ringlog")`` and
``df.writeStream.format("ringlog")`` (the sink: ``spark_bridge.sink``).

Schema and options mirror Spark's Kafka source (``format("kafka")``), so a job moves between
the two by changing the format name and ``bootstrap.servers``: here ``bootstrap.servers`` is
the cluster's data directory. See ``spark_bridge.options`` for the options and their rules.

Spark builds one instance per ``load()`` in the driver and pickles the readers it returns to
its Python workers; nothing here holds a connection.
"""
from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_bridge.options import (
    include_headers,
    parse_batch_options,
    parse_stream_options,
    validate_common,
)

#: The columns of Spark's Kafka source, in its order.
KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)

#: ``headers`` as Spark's Kafka source types it when ``includeHeaders=true``.
HEADERS_FIELD = StructField(
    "headers",
    ArrayType(
        StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    ),
)


#: Spark's error classes for a save mode / output mode a data source does not take.
SAVE_MODE_ERROR_CLASS = "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"
OUTPUT_MODE_ERROR_CLASS = "STREAMING_OUTPUT_MODE.UNSUPPORTED_DATASOURCE"


class SaveModeError(ValueError):
    """A write in a mode the ringlog sink does not take (Spark's message)."""


def ringlog_schema(include_headers):
    """The source's schema: KAFKA_SCHEMA, plus ``headers`` when asked for."""
    if include_headers:
        return StructType(KAFKA_SCHEMA.fields + [HEADERS_FIELD])
    return KAFKA_SCHEMA


class RinglogDataSource(DataSource):
    """Registered as ``ringlog``; options are Spark's Kafka source options. Spark builds it
    in a Python worker at ``load()``: that worker's interpreter is checked there
    (``worker_python``), before a query would crash the workers that run it."""

    def __init__(self, options):
        from spark_bridge import worker_python

        worker_python.check()
        super().__init__(options)

    @classmethod
    def name(cls):
        return "ringlog"

    def schema(self):
        # Spark calls schema() at load(): options every read needs are checked here already,
        # as Spark's Kafka source checks them; batch or stream rules wait for the reader.
        validate_common(self.options)
        return ringlog_schema(include_headers(self.options))

    def reader(self, schema):
        from spark_bridge.batch_reader import RinglogBatchReader

        return RinglogBatchReader(parse_batch_options(self.options), schema)

    def streamReader(self, schema):
        from spark_bridge.stream_reader import RinglogStreamReader

        return RinglogStreamReader(parse_stream_options(self.options), schema)

    def writer(self, schema, overwrite):
        from spark_bridge.sink import RinglogBatchWriter

        if overwrite:
            raise SaveModeError(f"[{SAVE_MODE_ERROR_CLASS}] The data source \"{self.name()}\" "
                                f"cannot be written in the \"Overwrite\" mode. Please use "
                                f"the \"Append\" mode instead.")
        return RinglogBatchWriter(self._sink_options(schema, streaming=False))

    def streamWriter(self, schema, overwrite):
        from spark_bridge.sink import RinglogStreamWriter

        if overwrite:
            raise SaveModeError(f"[{OUTPUT_MODE_ERROR_CLASS}] Invalid streaming output mode: "
                                f"complete. This output mode is not supported in Data Source "
                                f"{self.name()}. Use the append or update output mode.")
        return RinglogStreamWriter(self._sink_options(schema, streaming=True))

    def _sink_options(self, schema, streaming):
        """The sink's options, parsed, after the row schema is checked against them."""
        from spark_bridge.sink_options import parse_sink_options
        from spark_bridge.sink_rows import check_schema

        options = parse_sink_options(self.options, streaming=streaming)
        check_schema(schema, options.topic)
        return options
