"""What one acks=all replication round trip costs each broker: CPU and wake-ups.

Run from the repository root::

    .venv/bin/python perf/replication_cost.py [--round-trips 2000] [--rate 0] [--repeats 3]
                                              [--trees /work/main,.]

Three brokers, one partition with replication factor 3 and min.insync.replicas 2, one
producer (this process, acks=all, linger_ms 0). With ``--rate 0`` (the default) the producer
sends one 100-byte record and waits for its acknowledgement (``send().get()``), so each
record is one round trip: leader append -> both followers' fetches answered -> their
appends -> their next fetches carrying the new log end offsets -> high watermark ->
produce response. With ``--rate R`` it sends R records/s without waiting (several records
per round trip at higher rates). Per broker, leader and followers apart: CPU µs (user +
system, psutil) and voluntary context switches (wake-ups) per record over the measured
records, and the records/s.

CPU time is what a loaded machine distorts least (the 2-core development machine is shared;
wall-clock rates swing 2-4x between runs); the records/s are printed for reference only.
``--trees A,B`` runs each tree's code (``PYTHONPATH`` at it; this file from here) in turn,
alternating, ``--repeats`` times, and prints the medians of each tree and B ÷ A.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TOPIC = "replication-cost"
WARMUP = 200
BOUND = 60.0


def one_run(round_trips, rate):
    """One cluster, one measured series; returns the figures as a dict."""
    import psutil

    from cluster import Cluster, KafkaAdminClient, KafkaProducer, NewTopic
    from perf.suite.latency import Pacer
    data_dir = tempfile.mkdtemp(prefix="replication-cost-")
    cluster = Cluster(data_dir, brokers=3, auto_create_topics_enable=False)
    try:
        cluster.start()
        with KafkaAdminClient(bootstrap_servers=data_dir) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 3,
                                          topic_configs={"min.insync.replicas": "2"})])
        image = cluster.wait_for_metadata(
            lambda i: TOPIC in i.topics and len(i.topics[TOPIC].partitions[0].isr) == 3)
        leader = image.topics[TOPIC].partitions[0].leader
        processes = {b: psutil.Process(pid) for b, pid in cluster.pids().items()}
        value = b"x" * 100
        with KafkaProducer(bootstrap_servers=data_dir, acks="all", linger_ms=0,
                           enable_idempotence=False) as producer:
            for _ in range(WARMUP):
                producer.send(TOPIC, value).get(BOUND)
            before = {b: (p.cpu_times(), p.num_ctx_switches()) for b, p in processes.items()}
            started = time.monotonic()
            if rate:
                pacer = Pacer(rate)
                for n in range(round_trips):
                    pacer.wait(n)
                    producer.send(TOPIC, value)
                producer.flush(BOUND)
            else:
                for _ in range(round_trips):
                    producer.send(TOPIC, value).get(BOUND)
            wall = time.monotonic() - started
            after = {b: (p.cpu_times(), p.num_ctx_switches()) for b, p in processes.items()}
    finally:
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    figures = {"records_per_s": round_trips / wall}
    followers = 0
    for broker in sorted(processes):
        (cpu0, ctx0), (cpu1, ctx1) = before[broker], after[broker]
        role = "leader" if broker == leader else f"follower {followers + 1}"
        followers += broker != leader
        cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
        figures[f"{role} cpu_us"] = cpu / round_trips * 1e6
        figures[f"{role} wakeups"] = (ctx1.voluntary - ctx0.voluntary) / round_trips
    return figures


def _run_tree(tree, args):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--one", "--round-trips",
         str(args.round_trips), "--rate", str(args.rate)],
        cwd=os.path.abspath(tree), env=env, capture_output=True, text=True, check=True,
        timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _print(label, figures):
    print(f"{label}: " + ", ".join(
        f"{name} {value:,.1f}" if "cpu" in name or "per_s" in name else f"{name} {value:.3f}"
        for name, value in figures.items()), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--round-trips", type=int, default=2000,
                        help="records measured (one round trip each at --rate 0)")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="records/s without waiting for each (0: send().get() each)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trees", help="A,B: alternate runs of two source trees")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_run(args.round_trips, args.rate)))
        return 0
    trees = args.trees.split(",") if args.trees else ["."]
    runs = {tree: [] for tree in trees}
    for repeat in range(args.repeats):
        for tree in trees:
            figures = _run_tree(tree, args)
            runs[tree].append(figures)
            _print(f"{tree} run {repeat + 1} (load {os.getloadavg()[0]:.1f})", figures)
    medians = {tree: {name: statistics.median(r[name] for r in series)
                      for name in series[0]} for tree, series in runs.items()}
    for tree in trees:
        _print(f"median {tree}", medians[tree])
    if len(trees) == 2:
        a, b = (medians[t] for t in trees)
        print(f"{trees[1]} ÷ {trees[0]}: " + ", ".join(
            f"{name} {b[name] / a[name]:.2f}" for name in a if a[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
