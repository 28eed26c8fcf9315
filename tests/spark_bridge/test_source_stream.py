"""spark.readStream.format("ringlog") against a real cluster, written to a parquet sink
with a checkpoint and run with Trigger.AvailableNow: several micro-batches under
maxOffsetsPerTrigger with exactly the records produced, restarts that go on where the
checkpoint left off, new partitions and new topics matching subscribePattern picked up,
startingOffsets latest, and records deleted by retention before they were read
(failOnDataLoss true fails naming the partition and offsets; false skips them). Under a
processing-time trigger, minOffsetsPerTrigger holds micro-batches back through Spark's JVM
(the read limit goes there and back)."""
from __future__ import annotations

import json
import os
import time

import pytest

from cluster.structs import TopicPartition
from tests.spark_bridge.helpers import (
    add_partitions,
    create_topic,
    module_cluster,
    produce,
    rows_of,
    stream_reader,
    wait_for_log_start,
)
from tests.support.bounds import SPARK_QUERY_BOUND

# Every test uses the module's real cluster; the Spark queries are also marked spark and slow.
pytestmark = pytest.mark.multiprocess

cluster = module_cluster("spark-stream", brokers=1, log_retention_check_interval_ms=100)


class Pipeline:
    """A stream from the cluster into parquet under ``root``, run to completion with
    Trigger.AvailableNow each time ``run`` is called (same checkpoint every run)."""

    def __init__(self, spark, cluster, root, **options):
        self.spark, self.cluster, self.options = spark, cluster, options
        self.sink = os.path.join(root, "sink")
        self.checkpoint = os.path.join(root, "checkpoint")

    def run(self, **more):
        df = stream_reader(self.spark, self.cluster, **{**self.options, **more}).load()
        query = (df.writeStream.format("parquet").option("path", self.sink)
                 .option("checkpointLocation", self.checkpoint)
                 .trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(SPARK_QUERY_BOUND), \
                f"query still running after {SPARK_QUERY_BOUND} s"
            return [p["numInputRows"] for p in query.recentProgress]
        finally:
            query.stop()

    def rows(self):
        return rows_of(self.spark.read.parquet(self.sink))

    def last_offset(self):
        """The source offset of the last micro-batch in the checkpoint (JSON text)."""
        directory = os.path.join(self.checkpoint, "offsets")
        last = max((name for name in os.listdir(directory) if name.isdigit()), key=int)
        with open(os.path.join(directory, last)) as f:
            return f.read().splitlines()[-1]


def plain(produced):
    """Produced records as rows without the headers column."""
    return {k: (key, value, ts, None) for k, (key, value, ts, _) in produced.items()}


@pytest.mark.spark
@pytest.mark.slow
def test_available_now_in_micro_batches_then_restarts_and_new_partitions(spark, cluster,
                                                                          tmp_path):
    create_topic(cluster, "events", 3)
    produced = produce(cluster, "events", 500)
    pipeline = Pipeline(spark, cluster, str(tmp_path), subscribe="events",
                        startingOffsets="earliest", maxOffsetsPerTrigger="200")
    batches = [n for n in pipeline.run() if n]
    assert sum(batches) == 500
    assert len(batches) >= 3 and max(batches) <= 200 + 3
    assert pipeline.rows() == plain(produced)
    ends = {str(p): max(o for q, o in produced if q == p) + 1 for p in range(3)}
    assert pipeline.last_offset() == json.dumps({"events": ends})

    produced.update(produce(cluster, "events", 100, start=500))
    assert sum(pipeline.run()) == 100
    assert pipeline.rows() == plain(produced)

    add_partitions(cluster, "events", 5)
    for partition in (3, 4, None):
        produced.update(produce(cluster, "events", 50, start=len(produced),
                                partition=partition))
    assert sum(pipeline.run()) == 150
    assert pipeline.rows() == plain(produced)


def _input_rows(query):
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def _wait_for_rows(query, total):
    deadline = time.monotonic() + SPARK_QUERY_BOUND
    while sum(_input_rows(query)) < total:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"read {_input_rows(query)}, waiting for {total}"
        time.sleep(0.05)
    return _input_rows(query)


@pytest.mark.spark
@pytest.mark.slow
def test_min_offsets_per_trigger_holds_micro_batches_back(spark, cluster, tmp_path):
    create_topic(cluster, "trickle", 1)
    produce(cluster, "trickle", 30)
    df = stream_reader(spark, cluster, subscribe="trickle", startingOffsets="earliest",
                       minOffsetsPerTrigger="100", maxTriggerDelay="1h").load()
    query = (df.writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        assert _wait_for_rows(query, 30) == [30]  # a query's first trigger never waits
        produce(cluster, "trickle", 50, start=30)
        time.sleep(2.0)  # some 20 triggers, each with 50 records waiting: fewer than 100
        assert _input_rows(query) == [30]
        produce(cluster, "trickle", 60, start=80)
        assert _wait_for_rows(query, 140) == [30, 110]
    finally:
        query.stop()


@pytest.mark.spark
@pytest.mark.slow
def test_subscribe_pattern_picks_up_new_topics(spark, cluster, tmp_path):
    create_topic(cluster, "feed-a", 1)
    produced = produce(cluster, "feed-a", 50)
    pipeline = Pipeline(spark, cluster, str(tmp_path), subscribePattern="feed-.*",
                        startingOffsets="earliest")
    pipeline.run()
    create_topic(cluster, "feed-b", 2)
    feed_b = produce(cluster, "feed-b", 60)
    pipeline.run()
    df = spark.read.parquet(pipeline.sink)
    counts = {r.topic: r["count"] for r in df.groupBy("topic").count().collect()}
    assert counts == {"feed-a": 50, "feed-b": 60}
    assert len(produced) + len(feed_b) == df.count()


@pytest.mark.spark
@pytest.mark.slow
def test_starting_offsets_latest_skips_what_was_there(spark, cluster, tmp_path):
    create_topic(cluster, "fresh", 2)
    produce(cluster, "fresh", 40)
    pipeline = Pipeline(spark, cluster, str(tmp_path), subscribe="fresh",
                        includeHeaders="true")
    assert sum(pipeline.run()) == 0
    later = produce(cluster, "fresh", 30, start=40, headers_every=3)
    assert sum(pipeline.run()) == 30
    assert pipeline.rows() == later


@pytest.mark.spark
@pytest.mark.slow
def test_records_lost_to_retention_fail_the_query_or_are_skipped(spark, cluster, tmp_path):
    tp = TopicPartition("aging", 0)
    create_topic(cluster, "aging", 1, segment_bytes=2048, retention_bytes=4096)
    first = produce(cluster, "aging", 20, size=100, batch_size=1024)
    pipeline = Pipeline(spark, cluster, str(tmp_path), subscribe="aging",
                        startingOffsets="earliest")
    assert sum(pipeline.run()) == 20
    rest = produce(cluster, "aging", 400, start=20, size=100, batch_size=1024)
    log_start = wait_for_log_start(cluster, tp, 20)

    with pytest.raises(Exception, match=r"aging-0: records 20 to \d+ were deleted"):
        pipeline.run()

    pipeline.run(failOnDataLoss="false")
    rows = pipeline.rows()
    resumed = min(o for _, o in rows if o >= 20)
    assert resumed >= log_start
    assert rows == plain({**first, **{k: v for k, v in rest.items() if k[1] >= resumed}})


# -- the stream reader's offsets, called as Spark calls them (no Spark needed) ------------------

def stream_source(cluster, **options):
    from spark_bridge.options import parse_stream_options
    from spark_bridge.source import ringlog_schema
    from spark_bridge.stream_reader import RinglogStreamReader

    return RinglogStreamReader(parse_stream_options(
        {"bootstrap.servers": cluster.bootstrap_servers, **options}), ringlog_schema(False))


def test_initial_offset_latest_does_not_move_once_answered(cluster):
    create_topic(cluster, "moving", 1)
    produce(cluster, "moving", 10)
    source = stream_source(cluster, subscribe="moving")
    try:
        first = source.initialOffset()
        produce(cluster, "moving", 10, start=10)
        assert source.initialOffset() == first == {"moving": {"0": 10}}
    finally:
        source.stop()


def test_available_now_never_passes_the_first_high_watermarks(cluster):
    from pyspark.sql.streaming.datasource import ReadMaxRows

    create_topic(cluster, "capped", 2)
    produce(cluster, "capped", 100, partition=0)
    source = stream_source(cluster, subscribe="capped", startingOffsets="earliest",
                           maxOffsetsPerTrigger="30")
    try:
        source.prepareForTriggerAvailableNow()
        start = source.initialOffset()
        assert source.getDefaultReadLimit() == ReadMaxRows(30)
        seen = []
        for _ in range(10):
            end = source.latestOffset(start, source.getDefaultReadLimit())
            if end == start:
                break
            produce(cluster, "capped", 5, partition=1)  # after the target: never read
            seen.append(end["capped"]["0"])
            start = end
        assert seen == [30, 60, 90, 100]
        assert start == {"capped": {"0": 100, "1": 0}}
        assert source.reportLatestOffset() == start
    finally:
        source.stop()


def test_partitions_that_disappeared_or_went_back_are_data_loss(cluster):
    from spark_bridge.data_loss import DataLossError

    create_topic(cluster, "shrunk", 1)
    produce(cluster, "shrunk", 10)
    strict = stream_source(cluster, subscribe="shrunk")
    lenient = stream_source(cluster, subscribe="shrunk", failOnDataLoss="false")
    try:
        with pytest.raises(DataLossError, match="gone-0 are gone"):
            strict.partitions({"gone": {"0": 5}, "shrunk": {"0": 0}}, {"shrunk": {"0": 10}})
        with pytest.raises(DataLossError, match="shrunk-0's offset was changed from 20 to 10"):
            strict.partitions({"shrunk": {"0": 20}}, {"shrunk": {"0": 10}})
        assert lenient.partitions({"gone": {"0": 5}, "shrunk": {"0": 20}},
                                  {"shrunk": {"0": 10}}) == []
        ranges = lenient.partitions({"shrunk": {"0": 2}}, {"shrunk": {"0": 10}})
        assert [(r.topic, r.partition, r.from_offset, r.until_offset) for r in ranges] == \
            [("shrunk", 0, 2, 10)]
    finally:
        strict.stop()
        lenient.stop()
