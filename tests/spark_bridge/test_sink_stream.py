"""df.writeStream.format("ringlog") exactly once across a kill -9 of the driver: a query
copying a topic in small micro-batches runs in its own process (driver, JVM and Python
workers in one process group), is SIGKILLed while it writes, and is restarted on its
checkpoint in the test's session; the output, read with read_committed, holds every input
record exactly once. Also: the streaming sink refuses the complete output mode and a query
without checkpointLocation."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from cluster import KafkaConsumer
from cluster.structs import TopicPartition
from spark_bridge.sink_commit_log import SinkCommitLog
from tests.spark_bridge.helpers import create_topic, module_cluster, produce
from tests.spark_bridge.sink_query import copy_query
from tests.support.bounds import BOUND, SPARK_BRIDGE_BOUND, SPARK_QUERY_BOUND

pytestmark = [pytest.mark.multiprocess, pytest.mark.spark, pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

cluster = module_cluster("spark-sink-stream", brokers=2)


def committed_values(cluster, topic, partitions):
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                       isolation_level="read_committed", auto_offset_reset="earliest") as c:
        c.assign(tps)
        ends = c.end_offsets(tps)
        values = []
        deadline = time.monotonic() + BOUND
        while any(c.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "output not read within the bound"
            for records in c.poll(timeout_ms=1000).values():
                values.extend(r.value for r in records)
        return values


def done_batches(checkpoint):
    log = SinkCommitLog(str(checkpoint))
    try:
        return [n for n in os.listdir(log.directory) if n.endswith(".done")]
    except FileNotFoundError:
        return []


def test_each_row_once_after_a_kill_9_of_the_driver_mid_batch(spark, cluster, tmp_path):
    create_topic(cluster, "copy-in", 2)
    create_topic(cluster, "copy-out", 2)
    produced = produce(cluster, "copy-in", 600)
    checkpoint = tmp_path / "checkpoint"
    env = dict(os.environ, PYTHONPATH=ROOT)
    with open(tmp_path / "driver.err", "w") as err:
        driver = subprocess.Popen(
            [sys.executable, "-m", "tests.spark_bridge.sink_query",
             cluster.bootstrap_servers, "copy-in", "copy-out", str(checkpoint)],
            cwd=ROOT, env=env, stdout=err, stderr=err, start_new_session=True)
    group = []
    try:
        # Two Spark drivers at once (this session's and the child's) on a loaded machine.
        deadline = time.monotonic() + 2 * SPARK_BRIDGE_BOUND
        while len(done_batches(checkpoint)) < 2:
            assert driver.poll() is None, (tmp_path / "driver.err").read_text()[-3000:]
            assert time.monotonic() < deadline, "the query committed no 2 micro-batches"
            time.sleep(0.1)
        group = psutil.Process(driver.pid).children(recursive=True)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(BOUND)
        psutil.wait_procs(group, timeout=BOUND)
    assert len(done_batches(checkpoint)) < 600 // 40, "killed after the last batch"

    # The rest in one micro-batch (after the replay of the one the kill interrupted).
    query = copy_query(spark, cluster.bootstrap_servers, "copy-in", "copy-out",
                       str(checkpoint), rows_per_batch=None).trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(SPARK_BRIDGE_BOUND), "the restarted query hangs"
    finally:
        query.stop()
    assert query.exception() is None
    values = committed_values(cluster, "copy-out", 2)
    assert sorted(values) == sorted(value for _, value, _, _ in produced.values())


def test_complete_mode_and_a_missing_checkpoint_location_are_refused(spark, cluster,
                                                                     tmp_path):
    create_topic(cluster, "agg-in", 1)
    counts = (spark.readStream.format("ringlog").option("bootstrap.servers",
                                                        cluster.bootstrap_servers)
              .option("subscribe", "agg-in").load().groupBy("key").count()
              .selectExpr("cast(count as string) as value"))
    writer = (counts.writeStream.format("ringlog").outputMode("complete")
              .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
              .option("topic", "agg-out").option("checkpointLocation", str(tmp_path / "c1")))
    with pytest.raises(Exception, match="STREAMING_OUTPUT_MODE"):
        writer.start().awaitTermination(SPARK_QUERY_BOUND)
    plain = (spark.readStream.format("ringlog").option("bootstrap.servers",
                                                       cluster.bootstrap_servers)
             .option("subscribe", "agg-in").load().select("value"))
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "root"))
    try:
        with pytest.raises(Exception, match="checkpointLocation"):
            query = (plain.writeStream.format("ringlog").option(
                "kafka.bootstrap.servers", cluster.bootstrap_servers)
                .option("topic", "agg-out").start())
            query.awaitTermination(SPARK_QUERY_BOUND)
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
