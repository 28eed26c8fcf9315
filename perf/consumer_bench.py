"""Consumer throughput: a one-broker cluster, one partition, 100-byte values (Kafka's
consumer-perf-test workload), read back by KafkaConsumer.

Run from the repository root: ``.venv/bin/python -m perf.consumer_bench [--records N]
[--repeats R] [--batch-size B] [--fetch-bytes F]``.

The topic is filled once by the bulk send in ``--batch-size`` batches (Kafka's default
16 KB), then each repeat reads every record from offset 0 in a fresh consumer, three ways:

* ``poll_batches``  ringlog's bulk read: RecordColumns, no per-record object;
* ``poll``          kafka-python's API: a ConsumerRecord per record, ``max_poll_records``
                    at its default 500 (larger polls measured slower here: the records of
                    one poll then no longer fit the CPU caches);
* ``iter``          ``for record in consumer``, the loop most applications write.

Peers, measured in the same run on the same bytes (the whole partition read once from the
segment files): ``segments.record.records.iter_records``, the per-record decoder of the storage
layer (what a plain Python consumer would pay per record) and ``columns_parser`` alone
(the vectorised parse without any transport, a fetch's worth of batches at a time: the
ceiling for ``poll_batches``).

Each read is timed from a started consumer (metadata fetched, leader connected) to its
last record. Prints records/s and MB/s (value bytes, as Kafka's tool counts them) per way:
the median of the repeats, with the ratios to the peers; the project's goal is 2,000,000
records/s.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import tempfile
import time

import numpy as np

from cluster.producer.kafka_producer import KafkaProducer
from cluster.structs import TopicPartition
from cluster.supervisor.cluster import Cluster
from consumer_proc.columns_parser import parse_batches
from consumer_proc.consumer import KafkaConsumer
from segments.record.batch_header import iter_batches
from segments.record.records import iter_records

TOPIC = "consumer-bench"
VALUE_BYTES = 100
TARGET = 2_000_000


def fill(data_dir, records, batch_size):
    producer = KafkaProducer(bootstrap_servers=data_dir, acks=1, linger_ms=0)
    try:
        values = np.random.default_rng(7).integers(0, 256, (records, VALUE_BYTES), np.uint8)
        chunk = 100_000
        for start in range(0, records, chunk):
            futures = producer.send_batch(TOPIC, values[start:start + chunk], partition=0,
                                          batch_size=batch_size)
            for future in futures:
                future.get(60)
    finally:
        producer.close()


def consumer(data_dir, fetch_bytes, **extra):
    """A consumer at offset 0, started up: metadata known, leader connected (the timing
    then leaves start-up out, as Kafka's consumer-perf-test leaves its group join out)."""
    tp = TopicPartition(TOPIC, 0)
    c = KafkaConsumer(bootstrap_servers=data_dir, max_partition_fetch_bytes=fetch_bytes,
                      fetch_max_bytes=fetch_bytes, **extra)
    c.assign([tp])
    c.beginning_offsets([tp])
    c.seek(tp, 0)
    return c


def read_batches(data_dir, records, fetch_bytes):
    c = consumer(data_dir, fetch_bytes)
    try:
        start = time.perf_counter()
        count = value_bytes = 0
        while count < records:
            for runs in c.poll_batches(timeout_ms=1000).values():
                for columns in runs:
                    count += len(columns)
                    value_bytes += int(columns.value_lengths.sum())
        return count, value_bytes, time.perf_counter() - start
    finally:
        c.close()


def read_poll(data_dir, records, fetch_bytes):
    c = consumer(data_dir, fetch_bytes)
    try:
        start = time.perf_counter()
        count = value_bytes = 0
        while count < records:
            for batch in c.poll(timeout_ms=1000).values():
                count += len(batch)
                value_bytes += sum(r.serialized_value_size for r in batch)
        return count, value_bytes, time.perf_counter() - start
    finally:
        c.close()


def read_iter(data_dir, records, fetch_bytes):
    c = consumer(data_dir, fetch_bytes, consumer_timeout_ms=5000)
    try:
        start = time.perf_counter()
        count = value_bytes = 0
        for record in c:
            count += 1
            value_bytes += len(record.value)
            if count == records:
                break
        return count, value_bytes, time.perf_counter() - start
    finally:
        c.close()


def segment_bytes(data_dir):
    """The partition's batches, read straight from its segment files."""
    files = sorted(glob.glob(os.path.join(data_dir, "broker-*", f"{TOPIC}-0", "*.log")))
    return b"".join(open(path, "rb").read() for path in files)


def peer_iter_records(data):
    start = time.perf_counter()
    count = sum(1 for _ in iter_records(data))
    return count, count * VALUE_BYTES, time.perf_counter() - start


def peer_parser(data, fetch_bytes):
    """columns_parser over the segment bytes, a fetch's worth of batches at a time."""
    start = time.perf_counter()
    count = 0
    group = []
    size = 0
    for header in iter_batches(data):
        group.append(header)
        size += header.size_in_bytes
        if size >= fetch_bytes:
            count += sum(len(c) for c in parse_batches(data, group))
            group = []
            size = 0
    count += sum(len(c) for c in parse_batches(data, group))
    return count, count * VALUE_BYTES, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16384)
    parser.add_argument("--fetch-bytes", type=int, default=1 << 20,
                        help="max_partition_fetch_bytes and fetch_max_bytes (default: "
                             "Kafka's 1 MiB)")
    args = parser.parse_args(argv)
    data_dir = tempfile.mkdtemp(prefix="ringlog-consumer-bench-")
    cluster = Cluster(data_dir, brokers=1, num_partitions=1)
    try:
        cluster.start()
        started = time.perf_counter()
        fill(data_dir, args.records, args.batch_size)
        print(f"{args.records:,} records of {VALUE_BYTES} bytes in {args.batch_size}-byte "
              f"batches written in {time.perf_counter() - started:.1f} s; fetches of "
              f"{args.fetch_bytes:,} bytes; median of {args.repeats}")
        data = segment_bytes(data_dir)
        ways = {
            "poll_batches": lambda: read_batches(data_dir, args.records, args.fetch_bytes),
            "poll": lambda: read_poll(data_dir, args.records, args.fetch_bytes),
            "iter": lambda: read_iter(data_dir, args.records, args.fetch_bytes),
            "peer iter_records": lambda: peer_iter_records(data),
            "peer columns_parser": lambda: peer_parser(data, args.fetch_bytes),
        }
        rates = {}
        for name, run in ways.items():
            results = []
            for _ in range(args.repeats):
                count, value_bytes, elapsed = run()
                if count != args.records:
                    raise SystemExit(f"{name}: read {count} records, expected {args.records}")
                results.append((count / elapsed, value_bytes / elapsed / 1e6))
            rate = statistics.median(r for r, _ in results)
            megabytes = statistics.median(m for _, m in results)
            rates[name] = rate
            print(f"{name:>20}: {rate:13,.0f} records/s {megabytes:8.1f} MB/s")
        naive = rates["peer iter_records"]
        ceiling = rates["peer columns_parser"]
        for name in ("poll_batches", "poll", "iter"):
            print(f"{name:>20}: {rates[name] / naive:5.2f}x per-record decoding, "
                  f"{rates[name] / ceiling:5.2f}x the bare parser, "
                  f"{rates[name] / TARGET:5.2f}x the 2M records/s target")
    finally:
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
