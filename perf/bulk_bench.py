"""The performance suite's workloads 3 (bulk) and 6 (many client processes) for ringlog
alone, with CPU time per record in every process and the broker's context switches.

Run from the repository root: ``.venv/bin/python -m perf.bulk_bench [--records N]
[--processes P] [--repeats K] [--profile DIR]``.

One broker, 100-byte values, acks=1 (the suite's settings, ``perf/suite/peers/ringlog.py``):

* **bulk** (``--processes 2``, the default; workload 3): one producer calls ``send_batch``
  with 100,000 rows of a 2-D uint8 array per call and flushes; one consumer
  ``poll_batches`` until it has every record.
* **many clients** (``--processes P`` > 2; workload 6): P/2 producers ``send()`` record by
  record (linger_ms 5, batch 16 KB) to a partition each, P/2 consumers ``poll()`` one
  partition each, ``--records`` split over the producers.

Reported per run: end-to-end records/s (first send to the last consumer's last record:
secondary on a shared machine), CPU µs per record of the producers, the consumers and the
broker (``/proc/<pid>/stat``, so spinning and wake-ups count) and the broker's voluntary and
involuntary context switches per 1,000 records. ``--profile DIR`` writes a cProfile of
the first producer and the first consumer of the first run (``DIR/producer.prof``,
``DIR/consumer.prof``). Imports nothing of ``perf`` but this file, so the same file
measures another checkout (``PYTHONPATH=<checkout> python perf/bulk_bench.py``): the A/B.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

from perf.e2e_bench import process_cpu

TOPIC = "bulk-bench"
VALUE_BYTES = 100
#: Records per send_batch call (the suite's ``BULK_CALL``).
BULK_CALL = 100_000
#: Seconds a run may take before it is abandoned.
RUN_TIMEOUT = 180.0
_CTX = multiprocessing.get_context("spawn")


def _now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def context_switches(pid):
    """(voluntary, involuntary) context switches of process ``pid`` so far, all threads."""
    total = [0, 0]
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as status:
                for line in status:
                    if line.startswith("voluntary_ctxt_switches"):
                        total[0] += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        total[1] += int(line.split()[1])
        except FileNotFoundError:
            continue
    return total


def _profiled(path, function, *args):
    if not path:
        return function(*args)
    import cProfile
    profiler = cProfile.Profile(time.process_time)  # CPU time: the machine is shared
    try:
        return profiler.runcall(function, *args)
    finally:
        profiler.dump_stats(path)


# -- the client processes ----------------------------------------------------------------------

def _consumer_main(data_dir, partition, bulk, count, profile, results):
    from cluster.structs import TopicPartition
    from consumer_proc.consumer import KafkaConsumer
    consumer = KafkaConsumer(bootstrap_servers=data_dir, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        tp = TopicPartition(TOPIC, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        consumer.position(tp)
        results.put("ready")
        cpu = time.process_time()
        received = _profiled(profile, _consume, consumer, bulk, count)
        results.put((_now_ns(), received, time.process_time() - cpu))
    finally:
        consumer.close()


def _consume(consumer, bulk, count):
    received = 0
    deadline = time.monotonic() + RUN_TIMEOUT
    while received < count and time.monotonic() < deadline:
        if bulk:
            for runs in consumer.poll_batches(timeout_ms=100).values():
                for run in runs:
                    received += len(run)
        else:
            for records in consumer.poll(timeout_ms=100).values():
                received += len(records)
    return received


def _producer_main(data_dir, partition, bulk, count, profile, go, results):
    from cluster.producer.kafka_producer import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=data_dir, acks=1, linger_ms=5,
                             batch_size=16384, enable_idempotence=False)
    try:
        producer.partitions_for(TOPIC)
        rows = np.random.default_rng(0).integers(65, 91, size=(min(count, BULK_CALL),
                                                              VALUE_BYTES), dtype=np.uint8)
        pool = [row.tobytes() for row in rows[:1024]]
        results.put("ready")
        go.get()
        cpu = time.process_time()
        start = _now_ns()
        _profiled(profile, _produce, producer, partition, bulk, count, rows, pool)
        results.put((start, _now_ns(), time.process_time() - cpu))
    finally:
        producer.close()


def _produce(producer, partition, bulk, count, rows, pool):
    if bulk:
        for lo in range(0, count, len(rows)):
            producer.send_batch(TOPIC, rows[:min(len(rows), count - lo)], partition=partition)
    else:
        send = producer.send
        n = len(pool)
        for i in range(count):
            send(TOPIC, pool[i % n], partition=partition)
    producer.flush()


# -- one run -----------------------------------------------------------------------------------

def run_once(count, processes, profile_dir):
    """One cluster, ``processes`` / 2 partitions, producers and consumers at once; a dict
    of figures."""
    from cluster.admin.kafka_admin_client import KafkaAdminClient, NewTopic
    from cluster.supervisor.cluster import Cluster
    pairs = processes // 2
    bulk = pairs == 1
    per_producer = count // pairs
    count = per_producer * pairs
    data_dir = tempfile.mkdtemp(prefix="ringlog-bulk-bench-")
    started = []
    try:
        with Cluster(data_dir, brokers=1) as cluster:
            with KafkaAdminClient(bootstrap_servers=data_dir) as admin:
                admin.create_topics([NewTopic(TOPIC, pairs, 1)])
            [broker_pid] = cluster.pids().values()
            from_consumers, from_producers, go = _CTX.Queue(), _CTX.Queue(), _CTX.Queue()
            for n in range(pairs):
                profile = profile_dir and n == 0
                started.append(_CTX.Process(target=_consumer_main, daemon=True, args=(
                    data_dir, n, bulk, per_producer,
                    profile and os.path.join(profile_dir, "consumer.prof"), from_consumers)))
                started.append(_CTX.Process(target=_producer_main, daemon=True, args=(
                    data_dir, n, bulk, per_producer,
                    profile and os.path.join(profile_dir, "producer.prof"), go,
                    from_producers)))
            for process in started:
                process.start()
            for queue in (from_consumers, from_producers):
                for _ in range(pairs):
                    if queue.get(timeout=RUN_TIMEOUT) != "ready":
                        raise RuntimeError("a client process did not start")
            broker_cpu = process_cpu(broker_pid)
            switches = context_switches(broker_pid)
            for _ in range(pairs):
                go.put(True)
            produced = [from_producers.get(timeout=RUN_TIMEOUT) for _ in range(pairs)]
            consumed = [from_consumers.get(timeout=RUN_TIMEOUT) for _ in range(pairs)]
            broker_cpu = process_cpu(broker_pid) - broker_cpu
            after = context_switches(broker_pid)
            for process in started:
                process.join(RUN_TIMEOUT)
    finally:
        for process in started:
            if process.is_alive():
                process.kill()
                process.join()
        shutil.rmtree(data_dir, ignore_errors=True)
    received = sum(c[1] for c in consumed)
    if received < count:
        raise RuntimeError(f"the consumers received {received} of {count} records")
    start = min(p[0] for p in produced)
    figures = {"e2e krec/s": count / ((max(c[0] for c in consumed) - start) / 1e9) / 1e3}
    for name, cpu in (("producers", sum(p[2] for p in produced)),
                      ("consumers", sum(c[2] for c in consumed)), ("broker", broker_cpu)):
        figures[f"{name} cpu us/rec"] = cpu / count * 1e6
    figures["total cpu us/rec"] = sum(v for k, v in figures.items() if "cpu" in k)
    figures["broker vol cs/krec"] = (after[0] - switches[0]) / count * 1e3
    figures["broker invol cs/krec"] = (after[1] - switches[1]) / count * 1e3
    return figures


def print_table(title, runs):
    print(f"\n{title} (medians of {len(runs)} runs)")
    for name in runs[0]:
        values = [run[name] for run in runs]
        print(f"{name:24s}{statistics.median(values):14,.3f}   "
              f"({min(values):,.3f}-{max(values):,.3f})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000,
                        help="records of each run, over all producers (2,000,000)")
    parser.add_argument("--processes", type=int, default=2,
                        help="client processes: 2 = workload 3 (bulk), more = workload 6")
    parser.add_argument("--repeats", type=int, default=3, help="runs (3)")
    parser.add_argument("--profile", metavar="DIR",
                        help="write cProfiles of one producer and one consumer here")
    args = parser.parse_args(argv)
    if args.processes < 2 or args.processes % 2:
        parser.error(f"--processes must be even and at least 2, found {args.processes}")
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    runs = []
    for repeat in range(args.repeats):
        runs.append(run_once(args.records, args.processes,
                             args.profile if repeat == 0 else None))
        print(f"run {repeat + 1}/{args.repeats}: " + ", ".join(
            f"{k} {v:,.2f}" for k, v in runs[-1].items()), flush=True)
    kind = "send_batch + poll_batches" if args.processes == 2 else "send() + poll()"
    print_table(f"{args.processes} client processes, {args.records:,} records of "
                f"{VALUE_BYTES} B, {kind}", runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
