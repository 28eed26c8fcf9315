"""spark.read.format("ringlog") against a real two-broker cluster: the rows are exactly the
records produced (keys, values, offsets, CreateTime and LogAppendTime timestamps, headers),
offset range options, the timestamp options, subscribePattern and assign, minPartitions,
the same range read twice gives the same rows, records deleted by retention
(failOnDataLoss both ways), and bad options failing at load() with a message naming the
option."""
from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from cluster.structs import TopicPartition
from tests.spark_bridge.helpers import (
    client_rings,
    create_topic,
    module_cluster,
    produce,
    reader,
    rows_of,
    wait_for_log_start,
)
from tests.support.clock import T0

# Every test reads a real cluster through the Spark session (a JVM, slow to start).
pytestmark = [pytest.mark.multiprocess, pytest.mark.spark, pytest.mark.slow]

KAFKA_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]

cluster = module_cluster("spark-batch", brokers=2, log_retention_check_interval_ms=100)


@pytest.fixture(scope="module")
def logs(cluster):
    """Topic ``logs``, 3 partitions: 600 records, CreateTime T0 + i, headers on every 50th."""
    create_topic(cluster, "logs", 3)
    return produce(cluster, "logs", 600, headers_every=50, timestamp_ms=T0)


def without_headers(produced):
    return {k: (key, value, ts, None) for k, (key, value, ts, _) in produced.items()}


def test_rows_are_the_records_produced(spark, cluster, logs):
    df = reader(spark, cluster, subscribe="logs", includeHeaders="true").load()
    assert df.columns == KAFKA_COLUMNS + ["headers"]
    assert rows_of(df) == logs
    assert {r.topic for r in df.select("topic").distinct().collect()} == {"logs"}
    assert {r.timestampType for r in df.select("timestampType").distinct().collect()} == {0}
    assert sum(1 for r in logs.values() if r[3]) == 12


def test_without_include_headers_the_kafka_columns_only(spark, cluster, logs):
    df = reader(spark, cluster, subscribe="logs").load()
    assert df.columns == KAFKA_COLUMNS
    assert df.count() == 600


def test_log_append_time_topic(spark, cluster):
    create_topic(cluster, "appended", 2, message_timestamp_type="LogAppendTime")
    produced = produce(cluster, "appended", 100, timestamp_ms=T0)
    assert all(r[2] > T0 + 10**9 for r in produced.values())  # the broker's clock, not T0
    df = reader(spark, cluster, subscribe="appended").load()
    assert rows_of(df) == produced
    assert {r.timestampType for r in df.select("timestampType").distinct().collect()} == {1}


def test_starting_and_ending_offsets_json(spark, cluster, logs):
    df = reader(spark, cluster, subscribe="logs",
                startingOffsets='{"logs":{"0":10,"1":-2,"2":5}}',
                endingOffsets='{"logs":{"0":20,"1":-1,"2":5}}').load()
    expected = {(p, o): r for (p, o), r in logs.items()
                if (p == 0 and 10 <= o < 20) or p == 1}
    assert rows_of(df) == without_headers(expected)


def test_a_batch_between_two_timestamps(spark, cluster, logs):
    # Each partition from its first record at or after T0 + 100 to (not including) its
    # first at or after T0 + 400: the records with those timestamps, over 3 partitions.
    df = reader(spark, cluster, subscribe="logs", startingTimestamp=str(T0 + 100),
                endingTimestamp=str(T0 + 400), startingOffsets="earliest").load()
    want = {k: v for k, v in without_headers(logs).items() if T0 + 100 <= v[2] < T0 + 400}
    assert len({p for p, _ in want}) == 3 and rows_of(df) == want


def test_timestamps_by_partition_with_strategy_latest(spark, cluster, logs):
    # logs-0 has no record at or after T0 + 10**6: under strategy latest it starts at its
    # latest offset (no rows); the others from T0 + 500 to their first at T0 + 550.
    starting = {"logs": {"0": T0 + 10**6, "1": T0 + 500, "2": T0 + 500}}
    ending = {"logs": {"0": T0 + 10**6, "1": T0 + 550, "2": T0 + 550}}
    df = reader(spark, cluster, subscribe="logs", includeHeaders="true",
                startingOffsetsByTimestamp=json.dumps(starting),
                endingOffsetsByTimestamp=json.dumps(ending),
                startingOffsetsByTimestampStrategy="latest").load()
    want = {k: v for k, v in logs.items() if k[0] != 0 and T0 + 500 <= v[2] < T0 + 550}
    assert want and rows_of(df) == want


def test_earliest_and_latest_words(spark, cluster, logs):
    df = reader(spark, cluster, subscribe="logs", startingOffsets="earliest",
                endingOffsets="latest").load()
    assert rows_of(df) == without_headers(logs)


def test_assign_reads_only_the_partitions_named(spark, cluster, logs):
    df = reader(spark, cluster, assign='{"logs":[1]}').load()
    assert rows_of(df) == without_headers({k: v for k, v in logs.items() if k[0] == 1})


def test_subscribe_pattern_matches_whole_topic_names(spark, cluster):
    for name in ("pat-a", "pat-b", "xpat-c"):
        create_topic(cluster, name, 1)
        produce(cluster, name, 5)
    df = reader(spark, cluster, subscribePattern="pat-.*").load()
    counts = {r.topic: r["count"] for r in df.groupBy("topic").count().collect()}
    assert counts == {"pat-a": 5, "pat-b": 5}


def test_min_partitions_splits_ranges_into_more_tasks(spark, cluster, logs):
    df = reader(spark, cluster, subscribe="logs", minPartitions="7").load()
    tasks = df.select(F.spark_partition_id().alias("task")).distinct().count()
    assert tasks >= 7
    assert rows_of(df) == without_headers(logs)


def test_max_records_per_partition_caps_every_task(spark, cluster, logs):
    df = reader(spark, cluster, subscribe="logs", maxRecordsPerPartition="64").load()
    per_task = [r["count"] for r in
                df.groupBy(F.spark_partition_id().alias("task")).count().collect()]
    assert max(per_task) <= 64 and len(per_task) >= 600 // 64
    assert rows_of(df) == without_headers(logs)


def test_same_range_read_twice_gives_the_same_rows(spark, cluster):
    create_topic(cluster, "twice", 2)
    for partition in (0, 1):
        produce(cluster, "twice", 150, partition=partition)
    df = reader(spark, cluster, subscribe="twice", endingOffsets=json.dumps(
        {"twice": {"0": 100, "1": 120}})).load()
    first = rows_of(df)
    produce(cluster, "twice", 300, start=300)  # more records must not change the range
    assert rows_of(df) == first
    assert len(first) == 220
    assert {k[0]: max(o for p, o in first if p == k[0]) for k in first} == {0: 99, 1: 119}


def test_a_query_that_stops_early_closes_its_consumers(spark, cluster, logs):
    rows = reader(spark, cluster, subscribe="logs").load().limit(3).collect()
    assert len(rows) == 3
    assert client_rings(cluster) == []


def test_empty_topic_reads_no_rows(spark, cluster):
    create_topic(cluster, "empty", 2)
    assert reader(spark, cluster, subscribe="empty").load().count() == 0
    assert reader(spark, cluster, subscribe="no-such-topic").load().count() == 0


@pytest.fixture(scope="module")
def retained(cluster):
    """Topic ``retained`` whose first records retention already deleted: (log start offset,
    records produced)."""
    create_topic(cluster, "retained", 1, segment_bytes=2048, retention_bytes=4096)
    produced = produce(cluster, "retained", 400, size=100, batch_size=1024)
    start = wait_for_log_start(cluster, TopicPartition("retained", 0), 0)
    return start, produced


def test_fail_on_data_loss_fails_naming_the_lost_offsets(spark, cluster, retained):
    start, _ = retained
    df = reader(spark, cluster, subscribe="retained",
                startingOffsets='{"retained":{"0":0}}').load()
    with pytest.raises(Exception, match=r"retained-0: records 0 to \d+ were deleted"):
        df.collect()
    assert client_rings(cluster) == []  # the failed task closed its consumer


def test_without_fail_on_data_loss_the_read_skips_to_the_log_start(spark, cluster, retained):
    start, produced = retained
    df = reader(spark, cluster, subscribe="retained", failOnDataLoss="false",
                startingOffsets='{"retained":{"0":0}}').load()
    rows = rows_of(df)
    first = min(o for _, o in rows)
    assert first >= start
    assert rows == {k: v for k, v in produced.items() if k[1] >= first}


@pytest.mark.parametrize("options, named", [
    ({"subscribe": "logs", "assign": '{"logs":[0]}'}, "assign"),
    ({"subscribe": "logs", "startingOffsets": "latest"}, "startingOffsets"),
    ({"subscribe": "logs", "endingOffsets": '{"logs":{"0":-2}}'}, "endingOffsets"),
    ({"subscribe": "logs", "minPartitions": "-1"}, "minPartitions"),
    ({"subscribe": "logs", "startingOffsets": '{"logs":{"0":1}}'}, "startingOffsets"),
    ({"subscribe": "logs", "endingOffsets": '{"logs":{"0":100000,"1":-1,"2":-1}}'},
     "endingOffsets': offset 100000 of logs-0 is past its last committed record"),
    ({"subscribe": "logs", "startingTimestamp": str(T0 + 10**6)},
     f"No offset matched from request of topic-partition logs-0 and timestamp {T0 + 10**6}"),
    ({"subscribe": "logs", "startingOffsetsByTimestamp": '{"logs":{"0":5}}'},
     "startingOffsetsByTimestamp' names partitions \\[logs-0\\] but the query reads"),
])
def test_bad_options_fail_before_reading_naming_the_option(spark, cluster, logs, options,
                                                           named):
    with pytest.raises(Exception, match=named):
        reader(spark, cluster, **options).load().collect()
