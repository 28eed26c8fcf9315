"""What publishing stats pages costs: workload 1's shape with ``RINGLOG_STATS=1`` against
``RINGLOG_STATS=0``, alternating (issue 14; ``cluster.stats``).

Run by hand: ``.venv/bin/python -m perf.stats_bench [--pairs N] [--records N]``.

Each run starts a 1-broker cluster with one 1-partition topic, then one producer process
(``send()`` of 100-byte values, acks=1, linger 5 ms) and one consumer process reading them
all; the switch is in the environment of every process (brokers and clients). Per run:
records/s (the consumer's first to last record), and the CPU seconds (user + system) of
the broker, of the producer while it sends and of the consumer from its first record. The
order of the two settings alternates from pair to pair; the figures are medians over the
runs of each setting and the median of the per-pair ratios (the machine has 2 noisy
cores shared with other work: throughput of single runs varies by tens of percent, CPU
seconds less).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import psutil

from cluster import KafkaAdminClient, NewTopic
from cluster.supervisor.cluster import Cluster

TOPIC = "stats-bench"

PRODUCER = r'''
import os, sys
from cluster import KafkaProducer
producer = KafkaProducer(bootstrap_servers=sys.argv[1], acks=1, linger_ms=5)
value, send = b"x" * 100, producer.send
before = os.times()
for _ in range(int(sys.argv[2])):
    send(sys.argv[3], value)
producer.flush()
after = os.times()
producer.close()
print(after.user + after.system - before.user - before.system)
'''

CONSUMER = r'''
import os, sys, time
from cluster import KafkaConsumer
consumer = KafkaConsumer(sys.argv[3], bootstrap_servers=sys.argv[1],
                         auto_offset_reset="earliest")
count, wanted, first, before = 0, int(sys.argv[2]), None, None
while count < wanted:
    for records in consumer.poll(200).values():
        if first is None:
            first, before = time.monotonic(), os.times()
        count += len(records)
last, after = time.monotonic(), os.times()
consumer.close()
print(after.user + after.system - before.user - before.system, last - first)
'''

FIGURES = ("records_per_s", "broker_cpu", "producer_cpu", "consumer_cpu", "total_cpu")


def one_run(stats, records):
    """The figures of one run with ``RINGLOG_STATS=stats``."""
    env = dict(os.environ, RINGLOG_STATS=stats)
    saved = os.environ.get("RINGLOG_STATS")
    os.environ["RINGLOG_STATS"] = stats  # the brokers inherit it
    try:
        with tempfile.TemporaryDirectory() as tmp, \
                Cluster(os.path.join(tmp, "data"), brokers=1, num_partitions=1) as cluster:
            with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
                admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])
            cluster.wait_for_metadata(lambda image: TOPIC in image.topics and all(
                p.leader >= 0 for p in image.topics[TOPIC].partitions))
            [broker_pid] = cluster.pids().values()
            broker = psutil.Process(broker_pid)
            broker_before = sum(broker.cpu_times()[:2])
            argv = [cluster.bootstrap_servers, str(records), TOPIC]
            consumer = subprocess.Popen([sys.executable, "-c", CONSUMER, *argv], env=env,
                                        stdout=subprocess.PIPE, text=True)
            producer = subprocess.Popen([sys.executable, "-c", PRODUCER, *argv], env=env,
                                        stdout=subprocess.PIPE, text=True)
            producer_cpu = float(producer.communicate()[0])
            consumer_cpu, seconds = map(float, consumer.communicate()[0].split())
            broker_cpu = sum(broker.cpu_times()[:2]) - broker_before
    finally:
        if saved is None:
            del os.environ["RINGLOG_STATS"]
        else:
            os.environ["RINGLOG_STATS"] = saved
    return dict(records_per_s=records / seconds, broker_cpu=broker_cpu,
                producer_cpu=producer_cpu, consumer_cpu=consumer_cpu,
                total_cpu=broker_cpu + producer_cpu + consumer_cpu)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    runs = {"1": [], "0": []}
    for pair in range(args.pairs):
        for stats in ("1", "0") if pair % 2 == 0 else ("0", "1"):
            figures = one_run(stats, args.records)
            runs[stats].append(figures)
            print(f"pair {pair + 1} RINGLOG_STATS={stats}: " + ", ".join(
                f"{name} {figures[name]:,.3f}" for name in FIGURES), flush=True)
    for name in FIGURES:
        on = statistics.median(r[name] for r in runs["1"])
        off = statistics.median(r[name] for r in runs["0"])
        paired = statistics.median(a[name] / b[name] for a, b in zip(runs["1"], runs["0"]))
        print(f"{name}: on {on:,.3f}, off {off:,.3f}, on/off {on / off:.3f} "
              f"(median of pair ratios {paired:.3f})")


if __name__ == "__main__":
    main()
