"""spark.readStream.format("ringlog") follows a moved leader in a real 3-broker cluster: a
topic of RF 3 whose records are all committed (acks=all) is streamed into Spark's memory
sink some 150 records per micro-batch; after the first micro-batch the leader of
partition 0 is SIGKILLed. The query goes on at the new leader (the source's consumers
refresh their metadata) without failing, and the sink ends with every record exactly once,
at the partition and offset it was acknowledged at."""
from __future__ import annotations

import time

import pytest

from cluster import KafkaAdminClient, NewTopic
from tests.spark_bridge.helpers import module_cluster, produce, stream_reader
from tests.support.bounds import BOUND, SPARK_QUERY_BOUND

pytestmark = pytest.mark.multiprocess

cluster = module_cluster("spark-moves", brokers=3, replica_lag_time_max_ms=1000)

TOPIC = "moves"
COUNT = 300


def input_rows(query):
    return sum(p["numInputRows"] for p in query.recentProgress)


def wait_for_rows(query, total):
    deadline = time.monotonic() + SPARK_QUERY_BOUND
    while input_rows(query) < total:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"read {input_rows(query)}, waiting for {total}"
        time.sleep(0.05)


@pytest.mark.spark
@pytest.mark.slow
def test_a_stream_reads_every_committed_record_once_while_its_leader_is_killed(
        spark, cluster, tmp_path):
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(TOPIC, 2, 3)])
    cluster.wait_for_metadata(lambda i: TOPIC in i.topics and all(
        len(s.isr) == 3 for s in i.topics[TOPIC].partitions), timeout=BOUND)
    produced = produce(cluster, TOPIC, COUNT, batch_size=1024)
    df = stream_reader(spark, cluster, subscribe=TOPIC, startingOffsets="earliest",
                       maxOffsetsPerTrigger="150").load()
    query = (df.writeStream.format("memory").queryName("moved_leader")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="100 milliseconds").start())
    victim = cluster.metadata().topics[TOPIC].partitions[0].leader
    try:
        wait_for_rows(query, 1)
        cluster.kill_broker(victim)
        wait_for_rows(query, COUNT)
        assert query.exception() is None
    finally:
        query.stop()
        if victim not in cluster.pids():
            cluster.start_broker(victim)
    rows = spark.sql("SELECT partition, offset, key, value FROM moved_leader").collect()
    assert len(rows) == COUNT
    assert {(r.partition, r.offset): (None if r.key is None else bytes(r.key), bytes(r.value))
            for r in rows} == {at: (key, value) for at, (key, value, _, _) in produced.items()}
