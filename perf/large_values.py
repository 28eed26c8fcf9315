"""Large values end to end (the suite's workload 7 at 10 KB and 1 MB), ringlog alone, with
what each of the three processes pays per MB: CPU time, wake-ups, read/write calls.

Run from the repository root: ``.venv/bin/python -m perf.large_values [--sizes 10000,1000000]
[--mb 200] [--repeats 3] [--trees A_PATH,B_PATH] [--batch-size N]``.

One broker, one topic of one partition per run, the suite's producer settings (acks=1,
linger_ms 5, batch_size 16384, no idempotence; values from ``perf.suite.payloads.pool``)
and its consumer (``poll()``, a ConsumerRecord per record, from offset 0). Producer and
consumer are separate processes running at the same time. Reported per size, medians of
``--repeats`` runs:

* end-to-end MB/s (first send to the consumer's last record; 1e6 bytes of values);
* CPU ms per MB of values of the producer, the consumer and the broker (``/proc/<pid>/stat``
  of every thread, spinning included);
* wake-ups per MB (voluntary context switches: a process blocked and was woken) and
  read/write-family calls per MB (``syscr`` + ``syscw`` of ``/proc/<pid>/io``: read, pread,
  readv, write, pwrite, writev, sendfile ...), each process.

A/B of two source trees: ``--trees /work/main,/work/wt/x`` runs the same benchmark with
``PYTHONPATH`` set to each tree in turn (this file runs as a script, so the tree
without it can be measured) (alternating, a fresh cluster each run), and prints
both medians and B ÷ A. The machine is shared: CPU per MB and the counts are the figures
to quote, wall MB/s swings with the load.

``--batch-size N`` runs the producer with ``batch_size`` N instead of the suite's 16384: not
the suite's workload, a measure of what one request per record costs (with 16 KB batches a
10 KB value is a batch, and a Produce request, of its own: Kafka's rule of one batch per
partition per request).
"""
from __future__ import annotations

import argparse
import glob
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TOPIC = "large-values"
PRODUCER = dict(acks=1, linger_ms=5, batch_size=16384, enable_idempotence=False)
RUN_TIMEOUT = 180.0
_TICK = os.sysconf("SC_CLK_TCK")
_CTX = multiprocessing.get_context("spawn")


def _now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def values(size):
    """Distinct values of ``size`` random upper-case bytes (as ``perf.suite.payloads``; here
    so that an A/B run against an older tree measures the same values): 32 MB of them, at
    least 2, at most 1024."""
    import numpy as np
    count = max(2, min(1024, (32 << 20) // size))
    rows = np.random.default_rng(0).integers(65, 91, size=(count, size), dtype=np.uint8)
    return [row.tobytes() for row in rows]


def counters(pid):
    """(CPU s, voluntary context switches, read calls + write calls) of process ``pid``,
    over all its threads."""
    cpu = switches = 0
    for task in glob.glob(f"/proc/{pid}/task/*"):
        try:
            with open(f"{task}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
            cpu += int(fields[11]) + int(fields[12])
            with open(f"{task}/status") as status:
                for line in status:
                    if line.startswith("voluntary_ctxt_switches"):
                        switches += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            pass
    calls = 0
    with open(f"/proc/{pid}/io") as io:
        for line in io:
            name, _, value = line.partition(":")
            if name in ("syscr", "syscw"):
                calls += int(value)
    return cpu / _TICK, switches, calls


def _minus(after, before):
    return tuple(a - b for a, b in zip(after, before))


def _consumer_main(data_dir, count, size, results, go):
    from cluster import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=data_dir, enable_auto_commit=False)
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        consumer.position(tp)
        results.put("ready")
        go.get()
        before = counters(os.getpid())
        received = 0
        wrong = 0
        deadline = time.monotonic() + RUN_TIMEOUT
        while received < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                received += len(records)
                wrong += sum(len(r.value) != size for r in records)
        last = _now_ns()
        results.put((last, received, wrong, _minus(counters(os.getpid()), before)))
    finally:
        consumer.close()


def _producer_main(data_dir, count, size, results, go, batch_size):
    from cluster import KafkaProducer
    pool = values(size)
    producer = KafkaProducer(bootstrap_servers=data_dir, **dict(PRODUCER, batch_size=batch_size))
    try:
        producer.partitions_for(TOPIC)
        results.put("ready")
        go.get()
        before = counters(os.getpid())
        start = _now_ns()
        send = producer.send
        n = len(pool)
        for i in range(count):
            send(TOPIC, pool[i % n], partition=0)
        producer.flush()
        results.put((start, _now_ns(), _minus(counters(os.getpid()), before)))
    finally:
        producer.close()


def run_once(size, megabytes, batch_size=PRODUCER["batch_size"]):
    """One cluster, one topic, producer and consumer at once; a dict of figures."""
    from cluster import Cluster, KafkaAdminClient, NewTopic
    count = max(10, int(megabytes * 1e6) // size)
    data_dir = tempfile.mkdtemp(prefix="ringlog-large-values-")
    processes = []
    try:
        with Cluster(data_dir, brokers=1) as cluster:
            with KafkaAdminClient(bootstrap_servers=data_dir) as admin:
                admin.create_topics([NewTopic(TOPIC, 1, 1)])
            [broker_pid] = cluster.pids().values()
            from_consumer, from_producer = _CTX.Queue(), _CTX.Queue()
            go_consumer, go_producer = _CTX.Queue(), _CTX.Queue()
            consumer = _CTX.Process(target=_consumer_main, daemon=True, args=(
                data_dir, count, size, from_consumer, go_consumer))
            producer = _CTX.Process(target=_producer_main, daemon=True, args=(
                data_dir, count, size, from_producer, go_producer, batch_size))
            processes = [consumer, producer]
            for process in processes:
                process.start()
            for queue in (from_consumer, from_producer):
                if queue.get(timeout=RUN_TIMEOUT) != "ready":
                    raise RuntimeError("a client process did not start")
            broker_before = counters(broker_pid)
            go_consumer.put(True)
            go_producer.put(True)
            start, flushed, producer_counts = from_producer.get(timeout=RUN_TIMEOUT)
            last, received, wrong, consumer_counts = from_consumer.get(timeout=RUN_TIMEOUT)
            broker_counts = _minus(counters(broker_pid), broker_before)
            for process in processes:
                process.join(RUN_TIMEOUT)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
        shutil.rmtree(data_dir, ignore_errors=True)
    if received != count or wrong:
        raise RuntimeError(f"the consumer received {received} of {count} records, {wrong} of"
                           f" the wrong size")
    mb = count * size / 1e6
    figures = {"e2e MB/s": mb / ((last - start) / 1e9),
               "producer MB/s": mb / ((flushed - start) / 1e9)}
    for name, (cpu, switches, calls) in (("producer", producer_counts),
                                         ("broker", broker_counts),
                                         ("consumer", consumer_counts)):
        figures[f"{name} cpu ms/MB"] = cpu * 1e3 / mb
        figures[f"{name} wake-ups/MB"] = switches / mb
        figures[f"{name} rd+wr calls/MB"] = calls / mb
    figures["all cpu ms/MB"] = sum(figures[f"{n} cpu ms/MB"]
                                   for n in ("producer", "broker", "consumer"))
    return figures


def _print_table(title, runs_by_variant):
    variants = list(runs_by_variant)
    runs = runs_by_variant[variants[0]]
    print(f"\n{title} (medians of {len(runs)} runs)")
    print(f"{'':26s}" + "".join(f"{v:>14s}" for v in variants)
          + ("       B / A" if len(variants) == 2 else ""))
    for name in runs[0]:
        medians = [statistics.median(run[name] for run in runs_by_variant[v]) for v in variants]
        line = f"{name:26s}" + "".join(f"{m:14,.2f}" for m in medians)
        if len(medians) == 2 and medians[0]:
            line += f"{medians[1] / medians[0]:12.2f}"
        print(line, flush=True)


def _run_in_tree(tree, size, megabytes, batch_size):
    """run_once in a child interpreter whose PYTHONPATH is ``tree``; its figures."""
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", str(size),
                          "--mb", str(megabytes), "--batch-size", str(batch_size)],
                         env=env, cwd=tree, capture_output=True, text=True,
                         timeout=RUN_TIMEOUT * 2)
    if out.returncode:
        raise RuntimeError(f"run in {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,1000000",
                        help="value sizes in bytes, comma-separated (10000,1000000)")
    parser.add_argument("--mb", type=float, default=200.0, help="MB of values per run (200)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per variant (3)")
    parser.add_argument("--trees", help="A,B: two source trees to alternate (A/B)")
    parser.add_argument("--batch-size", type=int, default=PRODUCER["batch_size"],
                        help="the producer's batch_size (the suite's: 16384)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one run, JSON out
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_once(args.one, args.mb, args.batch_size)))
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    trees = args.trees.split(",") if args.trees else None
    variants = ["A", "B"] if trees else ["this tree"]
    for size in sizes:
        runs = {v: [] for v in variants}
        for repeat in range(args.repeats):
            for at, variant in enumerate(variants):
                figures = (_run_in_tree(trees[at], size, args.mb, args.batch_size) if trees
                           else run_once(size, args.mb, args.batch_size))
                runs[variant].append(figures)
                print(f"{size:,} B run {repeat + 1}/{args.repeats} {variant}: "
                      f"{figures['e2e MB/s']:,.1f} MB/s, cpu {figures['all cpu ms/MB']:.2f}"
                      f" ms/MB", flush=True)
        title = f"{size:,}-byte values, {args.mb:g} MB a run, batch_size {args.batch_size:,}"
        if trees:
            title += f" (A = {trees[0]}, B = {trees[1]})"
        _print_table(title, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
