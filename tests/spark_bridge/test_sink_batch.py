"""df.write.format("ringlog") against a real cluster: the rows read back (read_committed)
are exactly the rows written, with keys, headers, chosen partitions, the ``topic`` column
and the ``topic`` option; a failed task leaves nothing visible; bad schemas, a missing
topic, a null topic without the option and modes other than append fail with Spark's
error classes and messages."""
from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from tests.spark_bridge.helpers import create_topic, module_cluster, reader, rows_of

pytestmark = [pytest.mark.multiprocess, pytest.mark.spark, pytest.mark.slow]

cluster = module_cluster("spark-sink-batch", brokers=2)


def write(df, cluster, **options):
    w = df.write.format("ringlog").mode("append").option("kafka.bootstrap.servers",
                                                         cluster.bootstrap_servers)
    for name, value in options.items():
        w = w.option(name, value)
    return w


def committed(spark, cluster, topic):
    return rows_of(reader(spark, cluster, subscribe=topic, includeHeaders="true",
                          **{"kafka.isolation.level": "read_committed"}).load())


def test_rows_written_are_read_back(spark, cluster):
    create_topic(cluster, "sink-out", 3)
    df = spark.range(300).repartition(3).select(
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
        F.concat(F.lit("v"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.when(F.col("id") % 100 == 0, F.array(F.struct(
            F.lit("h").alias("key"), F.col("id").cast("string").cast("binary").alias("value")))
        ).alias("headers"),
        F.when(F.col("id") < 30, F.lit(2)).cast("int").alias("partition"))
    write(df, cluster, topic="sink-out").save()
    rows = committed(spark, cluster, "sink-out")
    got = sorted((key, value, headers) for key, value, _, headers in rows.values())
    want = sorted((f"k{i}".encode(), f"v{i}".encode(),
                   [("h", str(i).encode())] if i % 100 == 0 else None) for i in range(300))
    assert got == want
    in_partition_2 = {key for (partition, _), (key, _, _, _) in rows.items() if partition == 2}
    assert {f"k{i}".encode() for i in range(30)} <= in_partition_2


def test_topic_column_and_option(spark, cluster):
    create_topic(cluster, "sink-a", 1)
    create_topic(cluster, "sink-b", 1)
    df = spark.createDataFrame([("sink-a", "1"), (None, "2"), ("sink-a", "3")],
                               "topic string, value string")
    write(df, cluster, topic="sink-b").save()
    assert sorted(v for _, v, _, _ in committed(spark, cluster, "sink-a").values()) == \
        [b"1", b"3"]
    assert [v for _, v, _, _ in committed(spark, cluster, "sink-b").values()] == [b"2"]


def test_a_null_topic_without_the_option_fails_naming_it_and_writes_nothing(spark, cluster):
    create_topic(cluster, "sink-null", 1)
    df = spark.createDataFrame([("sink-null", "1"), (None, "2")],
                               "topic string, value string").coalesce(1)
    with pytest.raises(Exception, match="null topic present in the data") as info:
        write(df, cluster).save()
    assert "Use the topic option for setting a default topic" in str(info.value)
    assert committed(spark, cluster, "sink-null") == {}


#: (columns, Spark's message): the Kafka sink's schema errors (``_LEGACY_ERROR_TEMP_3080``),
#: which reach the caller inside Spark's PYTHON_DATA_SOURCE_ERROR for a Python data source.
BAD_COLUMNS = [
    ("value string", "topic option required when no 'topic' attribute is present"),
    ("topic string, key string", "Required attribute 'value' not found"),
    ("topic string, value int", "value attribute unsupported type int"),
    ("topic string, value string, key double", "key attribute unsupported type double"),
    ("topic int, value string", "topic attribute unsupported type int"),
    ("topic string, value string, partition long", "partition attribute unsupported type "
                                                   "bigint"),
    ("topic string, value string, headers array<string>",
     "headers attribute unsupported type array<string>"),
]
#: (save mode, Spark's error class)
BAD_MODES = [("overwrite", "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"),
             ("ignore", "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"),
             ("error", "UNSUPPORTED_DATA_SOURCE_SAVE_MODE")]


def refusal(save):
    """The text of the error ``save()`` raises (AssertionError if it raises none)."""
    with pytest.raises(Exception) as info:
        save()
    return str(info.value)


def test_bad_columns_and_modes_fail_with_sparks_error_class_and_message(spark, cluster):
    # One test, one session: each case is one save() of an empty DataFrame (Spark stops at
    # the first problem, so each message needs a query of its own); every case is checked
    # and the failures are reported together.
    wrong = []
    for columns, message in BAD_COLUMNS:
        text = refusal(write(spark.createDataFrame([], columns), cluster).save)
        if "PYTHON_DATA_SOURCE_ERROR" not in text or message not in text:
            wrong.append(f"columns {columns!r}: {text[:300]}")
    df = spark.createDataFrame([("t", "v")], "topic string, value string")
    for mode, error_class in BAD_MODES:
        text = refusal(write(df, cluster).mode(mode).save)
        if (f"[{error_class}]" not in text
                or 'The data source "ringlog" cannot be written in the' not in text):
            wrong.append(f"mode {mode!r}: {text[:300]}")
    assert not wrong, "\n".join(wrong)


def test_unknown_producer_option_is_refused_naming_it(spark, cluster):
    df = spark.createDataFrame([("t", "v")], "topic string, value string")
    with pytest.raises(Exception, match="linger.msec"):
        write(df, cluster, **{"kafka.linger.msec": "5"}).save()
