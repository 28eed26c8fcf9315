"""The ringlog source's readers across a leader change, without Spark, against fake brokers
(threads of this process, tests/support/fake_broker.py, whose brokers share each partition's
log as in-sync replicas would): a task's ``read_range`` and the driver's ``OffsetReader``
use the consumer's fetcher and offset lookups, so they follow a leader that moves or dies
mid-range, and a range gives every record of the log once, in order."""
from __future__ import annotations

from cluster.structs import TopicPartition
from spark_bridge.arrow_rows import arrow_schema
from spark_bridge.offset_ranges import OffsetRange
from spark_bridge.offset_reader import OffsetReader
from spark_bridge.options import parse_batch_options
from spark_bridge.partition_reader import read_range
from spark_bridge.source import ringlog_schema

TP = TopicPartition("t", 0)


def options(cluster):
    return parse_batch_options({"bootstrap.servers": cluster.data_dir, "subscribe": "t",
                                "kafkaConsumer.pollTimeoutMs": "10000"})


def append(cluster, first, count, per_batch=50):
    for start in range(first, first + count, per_batch):
        cluster.append("t", 0, [b"%05d" % i for i in range(start, start + per_batch)])


def rows(batches):
    return [(offset, value) for batch in batches
            for offset, value in zip(batch.column("offset").to_pylist(),
                                     batch.column("value").to_pylist())]


def test_a_range_is_read_once_while_its_leader_moves_and_dies(fake_cluster):
    cluster = fake_cluster(brokers=3)
    cluster.create_topic("t", leaders=[0])
    append(cluster, 0, 500)
    source = options(cluster)
    batches = read_range(source, OffsetRange("t", 0, 100, 1400),
                         arrow_schema(ringlog_schema(False)))
    got = [next(batches)]  # what broker 0 had: offsets 100..499
    cluster.move_leader("t", 0, 1)
    append(cluster, 500, 500)
    got.append(next(batches))  # from broker 1
    cluster.move_leader("t", 0, 2)
    cluster.stop_broker(1)
    append(cluster, 1000, 500)
    got += list(batches)  # from broker 2, cut at 1400
    expected = [(r.offset, r.value) for r in cluster.records("t", 0)][100:1400]
    assert rows(got) == expected
    fetched_from = [broker for broker, name, _ in cluster.requests if name == "FETCH"]
    assert set(fetched_from) == {0, 1, 2}


def test_the_planner_finds_offsets_at_the_new_leader(fake_cluster):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    append(cluster, 0, 100)
    reader = OffsetReader(options(cluster))
    try:
        assert reader.partitions() == [TP]
        assert reader.latest([TP]) == {TP: 100}
        cluster.move_leader("t", 0, 1)
        cluster.stop_broker(0)
        append(cluster, 100, 50)
        assert reader.earliest([TP]) == {TP: 0}
        assert reader.latest([TP]) == {TP: 150}
    finally:
        reader.close()
    assert [b for b, name, _ in cluster.requests if name == "LIST_OFFSETS"][-1] == 1
