"""A clean stop of a cluster holding many partitions: the time ``Cluster.stop`` takes.

    .venv/bin/python -m perf.stop_bench [--partitions 10000] [--brokers 1]
                                         [--replication-factor 1] [--repeats 3]

A cluster of ``--brokers`` brokers starts in a fresh data directory under /tmp, one topic of
``--partitions`` partitions is created with one CreateTopics (the creation path makes all of
a broker's new logs with one syncfs: the fastest honest set-up), one record is produced to
every partition (so every log has data to flush at the stop, and the brokers are past
their start-up work), then ``Cluster.stop`` is timed: SIGTERM to every broker, each closing
every log cleanly (recovery point checkpoint, producer snapshot, clean-shutdown marker),
until all have exited. The supervisor SIGKILLs a broker that takes longer than its stop
timeout (30 s): the stop then takes 30 s, and the logs are left without their marker.
Each repeat starts the cluster again, produces and stops; printed: each stop's time, the
median, and how many logs the last stop left without their clean-shutdown marker (a
SIGKILLed broker's: its next start recovers them).
The data directory is deleted at the end.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import tempfile
import time

from cluster import Cluster, KafkaAdminClient, KafkaProducer, NewTopic
from cluster.errors import NoBrokersAvailable
from segments.log import CLEAN_SHUTDOWN_MARKER

TOPIC = "wide"


def _producer(data_dir):
    """A producer, once a broker accepts it: just after a start a broker with 10,000
    partitions may be too busy to accept a connection within the client's wait."""
    deadline = time.monotonic() + 300
    while True:
        try:
            return KafkaProducer(bootstrap_servers=data_dir, linger_ms=50, acks=1)
        except NoBrokersAvailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def _produce_everywhere(data_dir, partitions):
    with _producer(data_dir) as producer:
        futures = [producer.send(TOPIC, value=b"x", partition=p) for p in range(partitions)]
        producer.flush()
        for future in futures:
            future.get(timeout=60)


def _unclean_logs(data_dir):
    """Partition directories without a clean-shutdown marker (the next open recovers them)."""
    dirs = glob.glob(os.path.join(data_dir, "broker-*", f"{TOPIC}-*"))
    return sum(not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_MARKER)) for d in dirs)


def _stop(cluster):
    start = time.perf_counter()
    cluster.stop()
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="ringlog-stop-bench-", dir="/tmp")
    data_dir = os.path.join(root, "data")
    cluster = Cluster(data_dir, brokers=args.brokers, auto_create_topics_enable=False,
                      start_timeout=120)
    stops = []
    try:
        cluster.start()
        start = time.perf_counter()
        with KafkaAdminClient(bootstrap_servers=data_dir, request_timeout_ms=300_000) as admin:
            admin.create_topics([NewTopic(TOPIC, args.partitions, args.replication_factor)],
                                timeout_ms=300_000)
        cluster.wait_for_metadata(
            lambda image: TOPIC in image.topics
            and len(image.topics[TOPIC].partitions) == args.partitions, timeout=300)
        print(f"created {args.partitions} partitions (RF {args.replication_factor}, "
              f"{args.brokers} brokers) in {time.perf_counter() - start:.1f} s")
        for repeat in range(args.repeats):
            if repeat:
                start = time.perf_counter()
                cluster.start()
                print(f"start: {time.perf_counter() - start:.1f} s")
            start = time.perf_counter()
            _produce_everywhere(data_dir, args.partitions)
            print(f"one record to each partition in {time.perf_counter() - start:.1f} s")
            stops.append(_stop(cluster))
            print(f"stop {repeat + 1}: {stops[-1]:.2f} s")
        median = statistics.median(stops)
        print(f"clean stop of {args.partitions} partitions: median {median:.2f} s "
              f"over {len(stops)} stops; logs left without a clean-shutdown marker: "
              f"{_unclean_logs(data_dir)}")
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
