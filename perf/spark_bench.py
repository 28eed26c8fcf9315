"""Spark batch read throughput: N committed 100-byte records from a ringlog topic into a
DataFrame aggregation, next to the ceiling of PySpark's Python data source path.

Run from the repository root: ``.venv/bin/python -m perf.spark_bench [--records N]
[--partitions P] [--repeats R]``.

A one-broker cluster gets a topic of ``--partitions`` partitions (default 2: one Spark task
per core of local[2]), filled once by the producer's bulk send (16 KB batches, null keys).
Each repeat then runs, in one local[2] Spark session::

    spark.read.format(F).load().groupBy("partition")
         .agg(count("*"), sum(length("value"))).collect()

for three sources, timed from ``load()`` to the collected answer (planning included):

* ``ringlog``       this repository's source: a consumer per task fetching from the broker,
                    RecordColumns turned into Arrow batches (``spark_bridge.arrow_rows``);
* ``in-memory``     a Python data source yielding the same rows — same schema, same number
                    of Spark tasks, Arrow batches of the same sizes the ringlog source made —
                    built once in memory: what Spark itself costs on this path (the
                    ceiling);
* ``reader alone``  ``partition_reader.read_range`` over the same ranges in this process,
                    no Spark: the source's own cost per record.

Prints records/s per way (median of the repeats), the ratio of ringlog to the ceiling, and
the project's goal (1,000,000 records/s). The answers of both Spark sources are checked
against each other (counts and value bytes per partition).
"""
from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import tempfile
import time

import numpy as np

TOPIC = "spark-bench"
VALUE_BYTES = 100
TARGET = 1_000_000
FILL_CHUNK = 200_000


def fill(data_dir, records, partitions):
    """Write ``records`` 100-byte values spread evenly over the partitions (bulk send)."""
    from cluster import KafkaAdminClient, KafkaProducer, NewTopic

    with KafkaAdminClient(bootstrap_servers=data_dir) as admin:
        admin.create_topics([NewTopic(TOPIC, partitions, 1)])
    producer = KafkaProducer(bootstrap_servers=data_dir, acks=1, linger_ms=0)
    try:
        values = np.random.default_rng(7).integers(0, 256, (FILL_CHUNK, VALUE_BYTES), np.uint8)
        share = records // partitions
        for partition in range(partitions):
            count = share + (records % partitions if partition == partitions - 1 else 0)
            for start in range(0, count, FILL_CHUNK):
                futures = producer.send_batch(TOPIC, values[:min(FILL_CHUNK, count - start)],
                                              partition=partition)
                for future in futures:
                    future.get(120)
    finally:
        producer.close()


def aggregate(df):
    """The benchmark's query: {partition: (count, value bytes)}."""
    from pyspark.sql import functions as F

    rows = (df.groupBy("partition")
            .agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect())
    return {r.partition: (r.n, r.bytes) for r in rows}


def ringlog_df(spark, data_dir):
    return (spark.read.format("ringlog").option("bootstrap.servers", data_dir)
            .option("subscribe", TOPIC).load())


def reader_alone(data_dir):
    """Read every range with ``read_range`` in this process; (records, Arrow batch sizes
    per range)."""
    from spark_bridge.arrow_rows import arrow_schema
    from spark_bridge.batch_reader import RinglogBatchReader
    from spark_bridge.options import parse_batch_options
    from spark_bridge.partition_reader import read_range
    from spark_bridge.source import ringlog_schema

    schema = ringlog_schema(False)
    reader = RinglogBatchReader(
        parse_batch_options({"bootstrap.servers": data_dir, "subscribe": TOPIC}), schema)
    sizes = []
    for offset_range in reader.partitions():
        sizes.append([b.num_rows for b in read_range(reader.options, offset_range,
                                                     arrow_schema(schema))])
    return sum(map(sum, sizes)), sizes


def make_in_memory_source(batch_sizes):
    """A Python data source, registered as ``ringlog_bench_memory``, whose task i yields
    Arrow batches of ``batch_sizes[i]`` rows of the ringlog schema: null keys, 100-byte
    values, topic, partition i, consecutive offsets, one timestamp. Everything but the offset
    column is built once per task."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class InMemoryReader(DataSourceReader):
        def __init__(self, schema):
            self.schema = schema

        def partitions(self):
            return [InputPartition((i, sizes)) for i, sizes in enumerate(batch_sizes)]

        def read(self, partition):
            import pyarrow as pa

            from spark_bridge.arrow_rows import arrow_schema, repeated_string

            index, sizes = partition.value
            schema = arrow_schema(self.schema)
            largest = max(sizes, default=0)
            data = np.random.default_rng(index).integers(0, 256, largest * VALUE_BYTES,
                                                        np.uint8)
            values = pa.Array.from_buffers(
                pa.binary(), largest,
                [None, pa.py_buffer(np.arange(largest + 1, dtype=np.int32) * VALUE_BYTES),
                 pa.py_buffer(data)])
            fixed = [pa.nulls(largest, type=pa.binary()), values,
                     repeated_string(TOPIC, largest),
                     pa.array(np.full(largest, index, dtype=np.int32))]
            stamps = pa.array(np.full(largest, 1_700_000_000_000_000, dtype=np.int64),
                              type=schema.field("timestamp").type)
            types = pa.array(np.zeros(largest, dtype=np.int32))
            offset = 0
            for size in sizes:
                offsets = pa.array(np.arange(offset, offset + size, dtype=np.int64))
                yield pa.RecordBatch.from_arrays(
                    [a.slice(0, size) for a in fixed] + [offsets, stamps.slice(0, size),
                                                         types.slice(0, size)],
                    schema=schema)
                offset += size

    class InMemorySource(DataSource):
        @classmethod
        def name(cls):
            return "ringlog_bench_memory"

        def schema(self):
            from spark_bridge.source import ringlog_schema

            return ringlog_schema(False)

        def reader(self, schema):
            return InMemoryReader(schema)

    return InMemorySource


def timed(run):
    """(seconds, result) of ``run()``."""
    started = time.perf_counter()
    result = run()
    return time.perf_counter() - started, result


@contextlib.contextmanager
def one_broker(prefix):
    """A one-broker cluster in a new temporary directory (named ``prefix``...), started;
    yields its data directory; stops the cluster and removes the directory at the end. The
    Spark benchmarks' setup (``spark_sink_bench`` too)."""
    from cluster import Cluster

    data_dir = tempfile.mkdtemp(prefix=prefix)
    cluster = Cluster(data_dir, brokers=1)
    try:
        cluster.start()
        yield data_dir
    finally:
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    from spark_bridge import get_spark

    with one_broker("ringlog-spark-bench-") as data_dir:
        started = time.perf_counter()
        fill(data_dir, args.records, args.partitions)
        print(f"{args.records:,} records of {VALUE_BYTES} bytes in {args.partitions} "
              f"partitions written in {time.perf_counter() - started:.1f} s")
        spark = get_spark(app_name="ringlog-spark-bench")
        _, (count, batch_sizes) = timed(lambda: reader_alone(data_dir))
        assert count == args.records, f"read {count} of {args.records} records"
        spark.dataSource.register(make_in_memory_source(batch_sizes))
        flat = [s for sizes in batch_sizes for s in sizes]
        print(f"Arrow batches: {len(flat)}, median {int(statistics.median(flat)):,} rows; "
              f"median of {args.repeats} repeats (after one warm-up each)")
        ways = {
            "ringlog": lambda: aggregate(ringlog_df(spark, data_dir)),
            "in-memory": lambda: aggregate(
                spark.read.format("ringlog_bench_memory").load()),
            "reader alone": lambda: reader_alone(data_dir)[0],
        }
        answers = {name: run() for name, run in ways.items() if name != "reader alone"}
        assert answers["ringlog"] == answers["in-memory"], answers
        assert sum(n for n, _ in answers["ringlog"].values()) == args.records
        times = {name: [] for name in ways}
        for _ in range(args.repeats):
            for name, run in ways.items():
                times[name].append(timed(run)[0])
        rates = {name: args.records / statistics.median(t) for name, t in times.items()}
        for name, rate in rates.items():
            print(f"  {name:<13} {rate:>12,.0f} records/s  "
                  f"({rate * VALUE_BYTES / 1e6:,.0f} MB/s of values)")
        ratio = rates["ringlog"] / rates["in-memory"]
        print(f"ringlog / in-memory ceiling: {ratio:.2f}; target {TARGET:,} records/s: "
              f"{'met' if rates['ringlog'] >= TARGET else 'NOT met'}")


if __name__ == "__main__":
    main()
