"""Producer → broker → consumer, end to end: the performance suite's workload 1 and its
latency workload, for ringlog alone, with CPU time per record in each of the three processes.

Run from the repository root: ``.venv/bin/python -m perf.e2e_bench [--records N]
[--latency-records M] [--rate R] [--repeats K] [--ab-broker KEY=VALUE ...]
[--ab-producer KEY=VALUE ...] [--ab-consumer KEY=VALUE ...]``.

One broker, one topic of one partition per run, 100-byte values, acks=1; producer and
consumer are separate processes (``multiprocessing``, spawned) running at the same time:

* **throughput** (workload 1): the producer calls ``send()`` record by record as fast as it
  goes (``linger_ms`` 0, Kafka's default) and flushes; the consumer ``poll()``s from offset
  0 until it has every record. Reported: producer records/s (first send to flush done),
  end-to-end records/s (first send to the consumer's last record) and CPU µs per record of
  the producer, the consumer and the broker (``/proc/<pid>/stat``, so spinning and
  wake-ups count).
* **latency**: the producer sends at a fixed ``--rate`` (default 10,000 records/s,
  ``linger_ms`` 0), stamping CLOCK_MONOTONIC into each value just before ``send()``; the
  consumer takes the clock as each ``poll()`` returns. Reported: p50 / p99 / p99.9 of
  send → receive, and of send → acknowledgement (the producer's callback), in µs.

A/B: with ``--ab-broker`` / ``--ab-producer`` / ``--ab-consumer`` the runs alternate
between A (defaults) and B (defaults plus those properties, e.g.
``ringlog.spin.iterations=200`` for the broker, ``ringlog_spin_iterations=200`` for a
client), each in its own cluster, and the medians of both and B ÷ A are printed. Medians of
``--repeats`` runs: the machine is shared and noisy, so CPU
per record and ratios measured in one run are the figures to quote. Peers (Redis Streams,
pyzmq) are the performance suite's (``python -m perf``); this bench is for measuring a
change to ringlog's own path.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time

import numpy as np

TOPIC = "e2e-bench"
VALUE_BYTES = 100
#: Value header of the latency run: record number, send time (CLOCK_MONOTONIC ns).
STAMP = struct.Struct("<qq")
#: Seconds a run may take before it is abandoned (a stuck run must not hang the bench).
RUN_TIMEOUT = 120.0
PERCENTILES = (50, 99, 99.9)
_TICK = os.sysconf("SC_CLK_TCK")
_CTX = multiprocessing.get_context("spawn")


def _now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def process_cpu(pid):
    """User + system CPU seconds used so far by process ``pid``."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


# -- the two client processes ------------------------------------------------------------------

def _consumer_main(data_dir, props, count, stamped, results):
    from cluster.structs import TopicPartition
    from consumer_proc.consumer import KafkaConsumer
    consumer = KafkaConsumer(bootstrap_servers=data_dir, **props)
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        consumer.position(tp)
        latencies = np.full(count if stamped else 0, -1, dtype=np.int64)
        unpack = STAMP.unpack_from
        results.put("ready")
        received = 0
        cpu = time.process_time()
        deadline = time.monotonic() + RUN_TIMEOUT
        while received < count and time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=200)
            now = _now_ns()
            for records in polled.values():
                received += len(records)
                if stamped:
                    for record in records:
                        seq, sent = unpack(record.value)
                        latencies[seq] = now - sent
        results.put((_now_ns(), received, time.process_time() - cpu, latencies))
    finally:
        consumer.close()


def _producer_main(data_dir, props, count, rate, go, results):
    from cluster.producer.kafka_producer import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=data_dir, acks=1, linger_ms=0, **props)
    try:
        producer.partitions_for(TOPIC)
        results.put("ready")
        go.get()
        acks = np.full(count if rate else 0, -1, dtype=np.int64)
        send = producer.send
        cpu = time.process_time()
        start = _now_ns()
        if rate:
            value = bytearray(VALUE_BYTES)
            began = time.perf_counter()
            for seq in range(count):
                gap = began + seq / rate - time.perf_counter()
                if gap > 0:
                    time.sleep(gap)
                sent = _now_ns()
                STAMP.pack_into(value, 0, seq, sent)
                send(TOPIC, bytes(value)).add_callback(
                    lambda _, seq=seq, sent=sent: acks.__setitem__(seq, _now_ns() - sent))
        else:
            value = b"x" * VALUE_BYTES
            for _ in range(count):
                send(TOPIC, value)
        producer.flush()
        results.put((start, _now_ns(), time.process_time() - cpu, acks))
    finally:
        producer.close()


# -- one run -----------------------------------------------------------------------------------

def run_once(broker_props, producer_props, consumer_props, count, rate):
    """One cluster, one topic, producer and consumer processes at once; a dict of figures.
    ``rate`` None: throughput run; else records/s of the latency run."""
    from cluster.admin.kafka_admin_client import KafkaAdminClient, NewTopic
    from cluster.supervisor.cluster import Cluster
    data_dir = tempfile.mkdtemp(prefix="ringlog-e2e-bench-")
    processes = []
    try:
        with Cluster(data_dir, brokers=1, config=broker_props) as cluster:
            with KafkaAdminClient(bootstrap_servers=data_dir) as admin:
                admin.create_topics([NewTopic(TOPIC, 1, 1)])
            [broker_pid] = cluster.pids().values()
            from_consumer, from_producer, go = _CTX.Queue(), _CTX.Queue(), _CTX.Queue()
            consumer = _CTX.Process(target=_consumer_main, daemon=True, args=(
                data_dir, consumer_props, count, rate is not None, from_consumer))
            producer = _CTX.Process(target=_producer_main, daemon=True, args=(
                data_dir, producer_props, count, rate, go, from_producer))
            processes = [consumer, producer]
            for process in processes:
                process.start()
            for queue in (from_consumer, from_producer):
                if queue.get(timeout=RUN_TIMEOUT) != "ready":
                    raise RuntimeError("a client process did not start")
            broker_cpu = process_cpu(broker_pid)
            go.put(True)
            start, flushed, producer_cpu, acks = from_producer.get(timeout=RUN_TIMEOUT)
            last, received, consumer_cpu, latencies = from_consumer.get(timeout=RUN_TIMEOUT)
            broker_cpu = process_cpu(broker_pid) - broker_cpu
            for process in processes:
                process.join(RUN_TIMEOUT)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
        shutil.rmtree(data_dir, ignore_errors=True)
    if received < count:
        raise RuntimeError(f"the consumer received {received} of {count} records")
    figures = {f"{name} cpu us/rec": cpu / count * 1e6 for name, cpu in
               (("producer", producer_cpu), ("consumer", consumer_cpu),
                ("broker", broker_cpu))}
    if rate is None:
        figures["producer rec/s"] = count / ((flushed - start) / 1e9)
        figures["e2e rec/s"] = count / ((last - start) / 1e9)
    else:
        for name, values in (("e2e", latencies), ("ack", acks)):
            arrived = values[values >= 0] / 1e3
            for p in PERCENTILES:
                figures[f"{name} p{p} us"] = float(np.percentile(arrived, p))
    return figures


# -- the report --------------------------------------------------------------------------------

def _props(pairs):
    props = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, found {pair!r}")
        props[key] = int(value) if value.lstrip("-").isdigit() else value
    return props


def _print_table(title, runs_by_variant):
    print(f"\n{title} (medians of {len(next(iter(runs_by_variant.values())))} runs)")
    names = list(next(iter(runs_by_variant.values()))[0])
    variants = list(runs_by_variant)
    print(f"{'':24s}" + "".join(f"{v:>14s}" for v in variants)
          + ("       B / A" if len(variants) == 2 else ""))
    for name in names:
        medians = [statistics.median(run[name] for run in runs_by_variant[v]) for v in variants]
        line = f"{name:24s}" + "".join(f"{m:14,.1f}" for m in medians)
        if len(medians) == 2 and medians[0]:
            line += f"{medians[1] / medians[0]:12.2f}"
        print(line)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000,
                        help="records of each throughput run (300,000)")
    parser.add_argument("--latency-records", type=int, default=20_000,
                        help="records of each latency run (20,000)")
    parser.add_argument("--rate", type=int, default=10_000,
                        help="records/s of the latency run (10,000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per variant (3)")
    parser.add_argument("--ab-broker", nargs="*", default=[], metavar="KEY=VALUE",
                        help="broker properties of variant B")
    parser.add_argument("--ab-producer", nargs="*", default=[], metavar="KEY=VALUE",
                        help="producer properties of variant B")
    parser.add_argument("--ab-consumer", nargs="*", default=[], metavar="KEY=VALUE",
                        help="consumer properties of variant B")
    args = parser.parse_args(argv)
    variants = {"A": ({}, {}, {})}
    if args.ab_broker or args.ab_producer or args.ab_consumer:
        variants["B"] = (_props(args.ab_broker), _props(args.ab_producer),
                         _props(args.ab_consumer))
        print("A: defaults; B: broker {}, producer {}, consumer {}".format(*variants["B"]))
    throughput = {name: [] for name in variants}
    latency = {name: [] for name in variants}
    for repeat in range(args.repeats):
        for name, props in variants.items():
            throughput[name].append(run_once(*props, args.records, None))
            latency[name].append(run_once(*props, args.latency_records, args.rate))
            print(f"run {repeat + 1}/{args.repeats} {name}: "
                  f"e2e {throughput[name][-1]['e2e rec/s']:,.0f} rec/s, latency p50 "
                  f"{latency[name][-1]['e2e p50 us']:,.0f} us p99 "
                  f"{latency[name][-1]['e2e p99 us']:,.0f} us", flush=True)
    _print_table(f"workload 1: {args.records:,} records of {VALUE_BYTES} B, acks=1, "
                 f"send() + poll() in two processes", throughput)
    _print_table(f"latency at {args.rate:,} records/s, linger_ms 0 "
                 f"({args.latency_records:,} records)", latency)
    return 0


if __name__ == "__main__":
    sys.exit(main())
