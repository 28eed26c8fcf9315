"""Spark sink throughput: rows/s from a DataFrame into a ringlog topic through
``df.write.format("ringlog")`` (each task one transaction, committed by the driver), next to
what users wrote before the sink existed — ``foreachBatch`` handing each partition to a
``KafkaProducer`` (acks=all, idempotent, no transactions: at least once).

Run from the repository root: ``.venv/bin/python -m perf.spark_sink_bench [--rows N]
[--partitions P] [--repeats R] [--value-bytes B]``.

A one-broker cluster; one local[2] Spark session; a cached DataFrame of ``--rows`` rows
(a string key ``k<i>``, a ``--value-bytes`` value) in ``--partitions`` Spark partitions
(default 2, one task per core). Each repeat runs both ways, alternating, each into a topic
of its own (2 partitions), timed from the action's start to its return:

* ``sink``          ``df.write.format("ringlog").mode("append")...save()``;
* ``foreachBatch``  ``df.foreachPartition(f)``, ``f`` sending every row with
                    ``KafkaProducer.send(topic, value, key=key)`` then ``flush()`` — what
                    a ``foreachBatch`` function does with each micro-batch.

Each run's records are counted in the topic afterwards (the sink's with read_committed).
Prints rows/s per way (median of the repeats) and the ratio sink ÷ foreachBatch.
"""
from __future__ import annotations

import argparse
import statistics

from perf.spark_bench import one_broker, timed


def topic_count(data_dir, topic, isolation_level):
    """Records of ``topic`` a consumer with ``isolation_level`` reads (offsets alone would
    count the transaction markers too)."""
    from cluster import KafkaConsumer
    from cluster.structs import TopicPartition

    with KafkaConsumer(bootstrap_servers=data_dir, isolation_level=isolation_level,
                       auto_offset_reset="earliest") as c:
        tps = [TopicPartition(topic, p) for p in c.partitions_for_topic(topic)]
        c.assign(tps)
        ends = c.end_offsets(tps)
        count = 0
        while any(c.position(tp) < ends[tp] for tp in tps):
            count += sum(len(records) for records in c.poll(timeout_ms=1000).values())
        return count


def send_partition(data_dir, topic):
    def send(rows):
        from cluster import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=data_dir, acks="all", linger_ms=5)
        try:
            for row in rows:
                producer.send(topic, row.value.encode(), key=row.key.encode())
            producer.flush()
        finally:
            producer.close()
    return send


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--value-bytes", type=int, default=100)
    args = parser.parse_args(argv)

    from pyspark.sql import functions as F

    from cluster import KafkaAdminClient, NewTopic
    from spark_bridge import get_spark

    with one_broker("ringlog-spark-sink-bench-") as data_dir:
        spark = get_spark(app_name="ringlog-spark-sink-bench")
        df = (spark.range(args.rows, numPartitions=args.partitions)
              .select(F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
                      F.rpad(F.col("id").cast("string"), args.value_bytes, ".").alias("value"))
              .cache())
        df.count()
        times = {"sink": [], "foreachBatch": []}
        with KafkaAdminClient(bootstrap_servers=data_dir) as admin:
            for repeat in range(args.repeats):
                for way in times:
                    topic = f"{way}-{repeat}"
                    admin.create_topics([NewTopic(topic, 2, 1)])
                    if way == "sink":
                        elapsed, _ = timed(lambda t=topic: (
                            df.write.format("ringlog").mode("append")
                            .option("kafka.bootstrap.servers", data_dir).option("topic", t)
                            .option("kafka.linger.ms", "5").save()))
                        isolation = "read_committed"
                    else:
                        elapsed, _ = timed(lambda t=topic: df.foreachPartition(
                            send_partition(data_dir, t)))
                        isolation = "read_uncommitted"
                    count = topic_count(data_dir, topic, isolation)
                    assert count == args.rows, f"{way}: {count} of {args.rows} rows in {topic}"
                    times[way].append(elapsed)
                    print(f"repeat {repeat} {way}: {args.rows / elapsed:,.0f} rows/s")
        medians = {way: args.rows / statistics.median(t) for way, t in times.items()}
        print(f"\n{args.rows:,} rows of {args.value_bytes} bytes, {args.partitions} Spark "
              f"partitions, median of {args.repeats}:")
        for way, rate in medians.items():
            print(f"  {way:13s} {rate:12,.0f} rows/s")
        print(f"  sink / foreachBatch: {medians['sink'] / medians['foreachBatch']:.2f}")


if __name__ == "__main__":
    main()
