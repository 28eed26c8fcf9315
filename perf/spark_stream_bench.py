"""Streaming latency of the Spark bridge: from a producer's ``send()`` to the row being in
the sink, at 10,000 records/s.

Run from the repository root: ``.venv/bin/python -m perf.spark_stream_bench [--rate R]
[--windows N] [--window-seconds S] [--warmup-seconds W] [--triggers none,1s]``.

Setup: a one-broker cluster, a 3-partition topic, and ``ringlog spark-bridge`` as its own
process (local[2], ``--sink parquet:DIR``), started and serving before the first record is
sent; each trigger interval gets its own topic. A producer process sends ``--rate`` records/s of
100 bytes, paced in slices of 10 ms on an absolute schedule (so a late slice does not
lower the rate), each value starting with ``time.time_ns()`` taken just before its
``send()`` (keyless records, acks=1, the producer's defaults otherwise).

"In the sink" is measured as the moment the row became visible to a reader of the sink:
when Spark committed the row's micro-batch to the sink's metadata log
(``DIR/_spark_metadata/<batch>``, its modification time; ``spark_bridge.sink_log``). That
is later than when the row's parquet file was written (an uncommitted file is not in the
sink: a reader skips it) and does not include any reader's own polling delay. Both clocks
are the host's wall clock (send time in the producer process, file times from the kernel).

Before the measured run, ``WARMUP_RECORDS`` records are sent and waited for (Spark starts
its Python workers with the first batch: start-up, reported apart), and the first
``--warmup-seconds`` of paced sending are left out. Then come ``--windows`` windows of
``--window-seconds`` each, by send time; for each window, p50 and p99 of its records'
latencies. Prints, per trigger interval, every window and the median over the windows,
the batches' mean size, and checks that every record sent reached the sink exactly once.
``none`` is the bridge's default (each micro-batch starts as soon as the previous one ends).

What bounds the latency: a record waits for the next micro-batch to start, then for that
batch to finish (latency ~ 1.5 x the batch duration when batches run back to back). A
batch of ~10-20 thousand rows took about 1-1.5 s here, nearly all of it in ``addBatch``
(the Python workers reading the records and Spark writing parquet); planning, the offset
log and the commit log add 0.1-0.4 s.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow.parquet as pq

from cluster.admin.kafka_admin_client import KafkaAdminClient, NewTopic
from cluster.producer.kafka_producer import KafkaProducer
from cluster.supervisor.cluster import Cluster
from spark_bridge.sink_log import committed_batches

TOPIC = "spark-stream-bench"
PARTITIONS = 3
VALUE_BYTES = 100
SLICE_SECONDS = 0.01
WARMUP_RECORDS = 1000
"""Sent and waited for before the measured run: Spark starts its Python workers and plans
the first batch then (tens of seconds on a loaded machine), which is start-up, not latency."""
BOUND = 180.0
"""Seconds the bridge may take to start, or to catch up at the end, before the run fails."""

_SEND_TIME = struct.Struct(">q")
CTX = multiprocessing.get_context("spawn")


def produce(bootstrap, topic, rate, seconds, results):
    """Producer process: ``rate`` records/s for ``seconds``, each value stamped with its
    send time (ns); reports how many were sent and acknowledged, and when sending began."""
    per_slice = max(1, round(rate * SLICE_SECONDS))
    padding = b"." * (VALUE_BYTES - _SEND_TIME.size)
    sent = 0
    with KafkaProducer(bootstrap_servers=bootstrap, acks=1) as producer:
        producer.partitions_for(topic)  # metadata before the clock starts
        began = time.time_ns()
        start = time.monotonic()
        slices = round(seconds / SLICE_SECONDS)
        for n in range(slices):
            delay = start + n * SLICE_SECONDS - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            for _ in range(per_slice):
                producer.send(topic, _SEND_TIME.pack(time.time_ns()) + padding)
            sent += per_slice
        producer.flush(60)
        elapsed = time.monotonic() - start
    results.put((sent, began, elapsed))


def start_bridge(bootstrap, topic, sink, checkpoint, trigger, log_path):
    argv = [sys.executable, "-m", "cluster.tools.cli", "spark-bridge", "--bootstrap-server",
            bootstrap, "--topic", topic, "--sink", f"parquet:{sink}", "--checkpoint",
            checkpoint, "--starting-offsets", "earliest"]  # the topic is empty until then
    if trigger != "none":
        argv += ["--trigger", trigger]
    with open(log_path, "w") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + BOUND
    while "spark-bridge: query" not in _read(log_path):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the bridge did not start:\n{_read(log_path)[-3000:]}")
        time.sleep(0.2)
    return process


def _read(log_path):
    with open(log_path) as log:
        return log.read()


def wait_for_rows(sink, count, bridge, log_path):
    """Return once the sink has committed ``count`` rows; RuntimeError after BOUND seconds
    or if the bridge exits."""
    deadline = time.monotonic() + BOUND
    while True:
        if os.path.isdir(os.path.join(sink, "_spark_metadata")) and sum(
                pq.read_metadata(f).num_rows for b in committed_batches(sink)
                for f in b.files) >= count:
            return
        if time.monotonic() > deadline or bridge.poll() is not None:
            raise RuntimeError(f"the sink did not get {count} records:\n"
                               f"{_read(log_path)[-3000:]}")
        time.sleep(0.2)


def sink_latencies(sink):
    """(send time ns, latency s) of every committed row, and the committed batches."""
    sends, latencies = [], []
    batches = [b for b in committed_batches(sink) if b.files]
    for batch in batches:
        values = pq.read_table(list(batch.files), columns=["value"]).column("value")
        for chunk in values.chunks:
            offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32)[
                chunk.offset:chunk.offset + len(chunk)]
            data = np.frombuffer(chunk.buffers()[2], dtype=np.uint8)
            stamp = data[offsets[:, None] + np.arange(_SEND_TIME.size)].copy().view(">i8")[:, 0]
            sends.append(stamp)
            latencies.append((batch.committed_ns - stamp) / 1e9)
    return np.concatenate(sends), np.concatenate(latencies), batches


def run_trigger(bootstrap, workdir, trigger, args):
    """One bridge with ``trigger`` on a topic of its own: its windows' (p50, p99) and the
    batches' figures."""
    topic = f"{TOPIC}-{trigger}"
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    sink = os.path.join(workdir, f"sink-{trigger}")
    checkpoint = os.path.join(workdir, f"checkpoint-{trigger}")
    log_path = os.path.join(workdir, f"bridge-{trigger}.log")
    bridge = start_bridge(bootstrap, topic, sink, checkpoint, trigger, log_path)
    try:
        warming = time.monotonic()
        with KafkaProducer(bootstrap_servers=bootstrap, acks=1) as producer:
            for _ in range(WARMUP_RECORDS):
                producer.send(topic, _SEND_TIME.pack(time.time_ns()).ljust(VALUE_BYTES, b"."))
        wait_for_rows(sink, WARMUP_RECORDS, bridge, log_path)
        first_batch = time.monotonic() - warming
        seconds = args.warmup_seconds + args.windows * args.window_seconds
        results = CTX.Queue()
        producer = CTX.Process(target=produce, args=(bootstrap, topic, args.rate, seconds, results))
        producer.start()
        sent, began, elapsed = results.get(timeout=seconds + BOUND)
        producer.join(60)
        wait_for_rows(sink, WARMUP_RECORDS + sent, bridge, log_path)
    finally:
        bridge.send_signal(signal.SIGTERM)
        bridge.wait(60)
    sends, latencies, batches = sink_latencies(sink)
    assert len(sends) == WARMUP_RECORDS + sent == len(np.unique(sends)), (
        f"{WARMUP_RECORDS + sent} records sent, {len(sends)} rows in the sink, "
        f"{len(np.unique(sends))} distinct")
    windows = []
    for n in range(args.windows):
        low = began + int((args.warmup_seconds + n * args.window_seconds) * 1e9)
        high = low + int(args.window_seconds * 1e9)
        chosen = latencies[(sends >= low) & (sends < high)]
        windows.append((np.percentile(chosen, 50), np.percentile(chosen, 99), len(chosen)))
    measured = [b for b in batches if b.committed_ns >= began]
    return dict(trigger=trigger, windows=windows, sent=sent, rate=sent / elapsed,
                batches=len(measured), rows_per_batch=sent / len(measured),
                first_batch=first_batch)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=10_000, help="records/s (default 10,000)")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window-seconds", type=float, default=6.0)
    parser.add_argument("--warmup-seconds", type=float, default=3.0,
                        help="seconds of sending left out before the first window")
    parser.add_argument("--triggers", default="none",
                        help="comma-separated trigger intervals to measure, e.g. none,1s "
                             "(default: none, the bridge's default)")
    args = parser.parse_args(argv)

    workdir = tempfile.mkdtemp(prefix="ringlog-spark-stream-bench-")
    try:
        with Cluster(os.path.join(workdir, "data"), brokers=1) as cluster:
            print(f"spark stream bench: {args.rate:,} records/s of {VALUE_BYTES} B into "
                  f"{PARTITIONS} partitions; bridge local[2] -> parquet; latency = send() to "
                  f"the batch's commit in the sink's metadata log; {args.warmup_seconds:g} s "
                  f"warm-up, then {args.windows} windows of {args.window_seconds:g} s",
                  flush=True)
            for trigger in args.triggers.split(","):
                result = run_trigger(cluster.bootstrap_servers, workdir, trigger, args)
                for n, (p50, p99, count) in enumerate(result["windows"]):
                    print(f"  trigger {trigger}: window {n}: {count:,} records, p50 "
                          f"{p50 * 1000:,.0f} ms, p99 {p99 * 1000:,.0f} ms")
                p50 = statistics.median(w[0] for w in result["windows"])
                p99 = statistics.median(w[1] for w in result["windows"])
                print(f"trigger {trigger}: p50 {p50 * 1000:,.0f} ms, p99 {p99 * 1000:,.0f} ms "
                      f"(median of {args.windows} windows); sent {result['sent']:,} at "
                      f"{result['rate']:,.0f} records/s, all in the sink once; "
                      f"{result['batches']} batches of {result['rows_per_batch']:,.0f} rows "
                      f"on average (the first batch, {WARMUP_RECORDS} records sent before, "
                      f"took {result['first_batch']:.1f} s)", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
