"""The ringlog sink's two-phase commit against a real cluster, without a JVM: the task
and driver steps of ``spark_bridge.sink`` called as Spark calls them, with the driver
"killed" between them. Each row written reaches read_committed readers exactly once:
a driver dying after the tasks prepared (before deciding), after deciding (before
committing) and after committing (before Spark's own commit log) — then the restarted
query finishing the decision and Spark replaying the micro-batch; a failed batch write
leaves nothing visible; a decision file that does not parse stops the query naming it."""
from __future__ import annotations

import pyarrow as pa
import pytest

from cluster import KafkaConsumer
from cluster.structs import TopicPartition
from spark_bridge.sink import RinglogBatchWriter, RinglogStreamWriter, write_task
from spark_bridge.sink_commit_log import SinkCommitLog, SinkCommitLogError
from spark_bridge.sink_options import parse_sink_options
from tests.spark_bridge.helpers import create_topic, module_cluster
from tests.support.bounds import BOUND

pytestmark = [pytest.mark.multiprocess]

cluster = module_cluster("sink-commit", brokers=1)

QUERY = "6c1f0e4e-query"


def rows(first, count):
    return pa.RecordBatch.from_pydict({"value": [b"v%d" % i for i in range(first, first + count)],
                                       "key": [b"k%d" % i for i in range(first, first + count)]})


def options(cluster, topic, checkpoint=None):
    given = {"kafka.bootstrap.servers": cluster.bootstrap_servers, "topic": topic}
    if checkpoint is not None:
        given["checkpointLocation"] = str(checkpoint)
    return parse_sink_options(given, streaming=checkpoint is not None)


def run_tasks(opts, batch_id, partitions=2, per_task=5):
    """The tasks of micro-batch ``batch_id``: task p writes rows [batch*100 + p*10, +per_task)."""
    return [write_task(opts, f"ringlog-sink-{QUERY}-{p}",
                       [rows(batch_id * 100 + p * 10, per_task)], eager=True)
            for p in range(partitions)]


def expected(batch_ids, partitions=2, per_task=5):
    return sorted(b"v%d" % (b * 100 + p * 10 + i) for b in batch_ids for p in range(partitions)
                  for i in range(per_task))


def committed_values(cluster, topic):
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                       isolation_level="read_committed", consumer_timeout_ms=1000,
                       auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        end = consumer.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
        values = []
        while consumer.position(TopicPartition(topic, 0)) < end:
            for records in consumer.poll(timeout_ms=BOUND * 1000).values():
                values.extend(r.value for r in records)
        return sorted(values)


def test_each_row_once_across_driver_deaths_at_every_step(cluster, tmp_path):
    create_topic(cluster, "eo", 1)
    opts = options(cluster, "eo", tmp_path / "checkpoint")
    writer = RinglogStreamWriter(opts)
    writer.commit(run_tasks(opts, 0), 0)                        # a normal micro-batch

    run_tasks(opts, 1)                                          # killed after the tasks
    writer = RinglogStreamWriter(opts)                          # restart: replay of 1
    writer.commit(run_tasks(opts, 1), 1)

    messages = run_tasks(opts, 2)                               # killed after deciding
    SinkCommitLog(opts.checkpoint_location).decide(2, [m.as_dict() for m in messages])
    writer = RinglogStreamWriter(opts)                          # restart finishes it ...
    assert SinkCommitLog(opts.checkpoint_location).done(2)
    writer.commit(run_tasks(opts, 2), 2)                        # ... Spark replays 2

    writer.commit(run_tasks(opts, 3), 3)                        # killed before Spark's log
    writer = RinglogStreamWriter(opts)
    writer.commit(run_tasks(opts, 3), 3)                        # replay of 3

    assert committed_values(cluster, "eo") == expected([0, 1, 2, 3])


def test_a_failed_batch_write_leaves_nothing_visible(cluster):
    create_topic(cluster, "eo-batch", 1)
    opts = options(cluster, "eo-batch")
    writer = RinglogBatchWriter(opts)
    messages = [write_task(opts, f"ringlog-sink-{writer.write_id}-{p}", [rows(p * 10, 5)])
                for p in range(2)]
    writer.abort(messages)
    writer = RinglogBatchWriter(opts)
    writer.commit([write_task(opts, f"ringlog-sink-{writer.write_id}-0", [rows(50, 3)])])
    assert committed_values(cluster, "eo-batch") == sorted(b"v%d" % i for i in range(50, 53))


def test_a_damaged_decision_stops_the_query_naming_it(cluster, tmp_path):
    opts = options(cluster, "eo", tmp_path / "checkpoint")
    log = SinkCommitLog(opts.checkpoint_location)
    log.decide(7, [])
    with open(f"{log.directory}/7", "wb") as file:
        file.write(b'{"batch": 7, "transac')
    with pytest.raises(SinkCommitLogError, match="ringlog-sink/7"):
        RinglogStreamWriter(opts)
