"""`make demo`: a 3-broker cluster, several producer and consumer processes, checked exactly once.

1. Start a 3-broker cluster in a fresh directory and create a 6-partition topic.
2. Start the consumer processes (each assigned two partitions), then the producer processes;
   every producer sends its numbered records with keys, so murmur2 spreads them over the
   partitions as Kafka would.
3. When the producers are done, tell the consumers where each partition ends; each consumer
   reads up to there and checks, per partition, that every producer's sequence numbers only
   grow (order), and reports which records it saw.
4. Check that every record of every producer arrived exactly once and print the throughput.
5. Spark: count the records per key with a local-mode Spark batch read of the topic
   (``spark.read.format("ringlog")``, Spark's Kafka source schema) and check every count
   against what the producers sent.
6. Stop Spark and the cluster and check that nothing is left running or in /dev/shm.
7. Print a line per process of the run (brokers, clients, the Spark bridge's readers): peak
   RSS, GC collections, longest GC pause and CPU seconds, from their stats pages, read
   every second while the demo ran (``cluster.tools.observe``).

Before it starts anything the demo checks that Spark will find a Java runtime (as Spark's
``spark-class`` looks: ``$JAVA_HOME/bin/java``, else ``java`` on PATH) and that it may use
the data directory: never one a live cluster holds (a broker holding its lock, or the
supervisor of ``cluster.json``; it says to run ``ringlog cluster stop``), and it deletes only
a directory it made itself (``MARKER`` inside); any other non-empty directory is refused.
The last line is ``demo passed`` or ``demo FAILED: <reason>``; the exit code 0 or 1.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import shlex
import shutil
import sys
import time
import traceback

import numpy as np
import psutil

from cluster import (
    Cluster,
    KafkaAdminClient,
    KafkaConsumer,
    KafkaProducer,
    NewTopic,
    TopicPartition,
)
from cluster.metadata import data_dir as dd
from cluster.supervisor.supervisor import read_record, running_brokers, supervisor_alive
from cluster.tools.observe import pages, report
from cluster.tools.observe.sampler import Sampler
from cluster.tools.support import ToolError, describe
from shm_ring import list_objects
from spark_bridge import jvm
from spark_bridge.session import get_spark

TOPIC = "demo"
PARTITIONS = 6
VALUE_SIZE = 100
KEYS_PER_PRODUCER = 1000
CTX = multiprocessing.get_context("spawn")
SAMPLE_INTERVAL = 0.5
"""Seconds between two reads of the stats pages for the closing per-process table."""

MARKER = ".ringlog-demo"
"""The file the demo writes into a data directory it made: its licence to delete it later."""

JAVA_PACKAGE = "default-jre-headless"
"""Debian's Java runtime for Spark (17 on bookworm; Spark 4 needs 17 or newer)."""


def encode(producer, seq):
    """A 100-byte value that says who sent it and its sequence number."""
    return b"%02d:%010d:" % (producer, seq) + b"x" * (VALUE_SIZE - 14)


def produce(bootstrap, producer, count, results):
    """Producer process: send ``count`` keyed records, wait for every acknowledgement."""
    started = time.perf_counter()
    with KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5) as p:
        futures = [p.send(TOPIC, encode(producer, seq),
                          key=b"p%d-k%d" % (producer, seq % KEYS_PER_PRODUCER))
                   for seq in range(count)]
        p.flush(timeout=120)
        failed = sum(1 for f in futures if f.failed())
    results.put(("producer", producer, failed, time.perf_counter() - started))


def consume(bootstrap, consumer, partitions, producers, count, ends, results):
    """Consumer process: read its partitions up to the end offsets the parent sends; check
    order per partition and return a bitmap of the records it saw, per producer."""
    seen = np.zeros((producers, count), dtype=np.uint8)
    out_of_order = 0
    tps = [TopicPartition(TOPIC, p) for p in partitions]
    last = {}  # (partition, producer) -> last sequence number
    targets = None
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            for tp, records in c.poll(timeout_ms=100, max_records=5000).items():
                for record in records:
                    producer, seq = int(record.value[:2]), int(record.value[3:13])
                    seen[producer, seq] += 1
                    if last.get((tp.partition, producer), -1) >= seq:
                        out_of_order += 1
                    last[tp.partition, producer] = seq
            if targets is None and not ends.empty():
                targets = ends.get()
            if targets is not None and all(c.position(tp) >= targets[tp.partition] for tp in tps):
                break
    results.put(("consumer", consumer, seen, out_of_order))


def expected_counts(producers, count):
    """{key: records} for what ``producers`` producers sending ``count`` records each send."""
    full, extra = divmod(count, KEYS_PER_PRODUCER)
    return {b"p%d-k%d" % (producer, k): full + (k < extra)
            for producer in range(producers) for k in range(min(count, KEYS_PER_PRODUCER))}


class SparkStageFailed(ToolError):
    """The Spark stage failed; the message is Spark's reason, in one line (plain text: it
    outlives the JVM, unlike Spark's own exception)."""


def spark_counts(bootstrap):
    """Spark's answer: {key: records} over the whole topic, from a batch read through the
    ringlog source; the seconds Spark took to start and to count; the JVM and its Python
    workers (stopped on return). SparkStageFailed if Spark's read or count fails (Spark's
    error printed to stderr first, while the JVM that formats it runs)."""
    started = time.perf_counter()
    spark = get_spark("ringlog-demo")
    try:
        ready = time.perf_counter()
        counts = count_by_key(spark, bootstrap)
        counted = time.perf_counter()
        processes = jvm.spark_processes()
    finally:
        jvm.stop_spark(spark)
    return counts, ready - started, counted - ready, processes


def count_by_key(spark, bootstrap):
    """{key: records} of the demo topic, counted by ``spark``; SparkStageFailed naming
    Spark's reason if that fails."""
    try:
        records = (spark.read.format("ringlog").option("bootstrap.servers", bootstrap)
                   .option("subscribe", TOPIC).load())
        return {bytes(row["key"]): row["count"]
                for row in records.groupBy("key").count().collect()}
    except Exception as exc:  # Spark's exception formats itself through the JVM: now or never
        text = jvm.error_text(exc)
        print(text, file=sys.stderr, flush=True)
        raise SparkStageFailed(f"the Spark stage failed: {jvm.error_reason(text)}") from None


def java_missing():
    """Why Spark could not start its JVM here, or None: Spark's ``spark-class`` runs
    ``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else ``java`` from PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        if os.access(os.path.join(home, "bin", "java"), os.X_OK):
            return None
        return (f"JAVA_HOME={home} has no bin/java, and Spark needs a Java runtime: point "
                f"JAVA_HOME at one (17 or newer) or unset it")
    if shutil.which("java"):
        return None
    return (f"Spark needs a Java runtime and there is none (no java on PATH, JAVA_HOME unset); "
            f"install one with: sudo apt-get install -y {JAVA_PACKAGE}")


def claim_data_dir(data_dir):
    """Make ``data_dir`` an empty directory of the demo's (with ``MARKER``); return None, or
    why the demo may not use it: a live cluster holds it (its brokers' locks, or the
    supervisor its ``cluster.json`` names), or it is not empty and the demo did not make it.
    Only a directory with the marker is deleted, and only when no cluster runs there."""
    running = running_brokers(data_dir)
    record = read_record(data_dir)
    holders = [f"brokers (id: pid) {running}"] if running else []
    if record.get("state") != "stopped" and supervisor_alive(record):
        holders.append(f"supervisor pid {record['supervisor_pid']}")
    if holders:
        return (f"a ringlog cluster is running in {data_dir} ({', '.join(holders)}); stop it "
                f"with: ringlog cluster stop --data-dir {shlex.quote(data_dir)} (or give the "
                f"demo another --data-dir)")
    marker = os.path.join(data_dir, MARKER)
    if os.path.isfile(marker):
        shutil.rmtree(data_dir)
    elif os.path.lexists(data_dir) and not (os.path.isdir(data_dir) and not os.listdir(data_dir)):
        return (f"{data_dir} exists and the demo did not make it (no {MARKER} in it), so it "
                f"will not delete it: give the demo another --data-dir, or remove it yourself")
    dd.make_data_dir(data_dir)  # 0700, as the cluster makes it
    with dd.private_umask(), open(marker, "w", encoding="ascii") as file:
        file.write("made by `make demo` (spark_bridge/demo.py), which deletes it when it runs "
                   "again\n")
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="demo-data")
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--records", type=int, default=300_000, help="records per producer")
    args = parser.parse_args(argv)
    if PARTITIONS % args.consumers:
        parser.error(f"--consumers must divide the {PARTITIONS} partitions, found {args.consumers}")
    try:
        problems = run(args)
    except Exception as exc:  # whatever it was, the last line says the demo failed and why
        sys.stdout.flush()
        if not isinstance(exc, SparkStageFailed):  # Spark's error is printed already
            traceback.print_exc()
        sys.stderr.flush()
        problems = [reason(exc)]
    print("demo passed" if not problems else "demo FAILED: " + "; ".join(problems), flush=True)
    return 1 if problems else 0


def reason(exc):
    """The first line of what ``exc`` says (``describe``), or its class when it cannot say
    (an exception whose ``str()`` raises: the verdict line is printed all the same)."""
    try:
        return describe(exc).splitlines()[0]
    except Exception:
        return f"{type(exc).__name__} (its message could not be formatted)"


def run(args):
    """The demo (module doc); returns what went wrong (empty: it passed). Starts nothing
    unless Java is there and the data directory may be used."""
    data_dir = os.path.abspath(args.data_dir)
    refusal = java_missing() or claim_data_dir(data_dir)
    if refusal:
        return [refusal]
    cluster = Cluster(data_dir, brokers=3)
    processes, broker_pids, spark_processes, problems = [], {}, [], []
    sampler = None
    try:
        cluster.start()
        cluster_id = cluster.cluster_id
        sampler = Sampler(lambda: pages.read_pages(cluster_id), SAMPLE_INTERVAL).start()
        bootstrap = cluster.bootstrap_servers
        broker_pids = cluster.pids()
        print(f"ringlog demo: cluster {cluster.cluster_id} in {args.data_dir}, brokers (id: pid) "
              f"{broker_pids}")
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])
        for topic in admin.describe_topics([TOPIC]):
            leaders = [p["leader_id"] for p in topic["partitions"]]
            print(f"1. topic {TOPIC!r}: {PARTITIONS} partitions, leaders {leaders}")
        admin.close()

        results, ends = CTX.Queue(), [CTX.Queue() for _ in range(args.consumers)]
        per_consumer = PARTITIONS // args.consumers
        for n in range(args.consumers):
            partitions = list(range(n * per_consumer, (n + 1) * per_consumer))
            processes.append(CTX.Process(target=consume, args=(
                bootstrap, n, partitions, args.producers, args.records, ends[n], results)))
        for n in range(args.producers):
            processes.append(CTX.Process(target=produce,
                                         args=(bootstrap, n, args.records, results)))
        for process in processes:
            process.start()
        started = time.perf_counter()
        total = args.producers * args.records
        producer_reports = _reports(results, args.producers, "producer")
        produced = time.perf_counter() - started
        failed = sum(r[2] for r in producer_reports if r[0] == "producer")
        sending = max(r[3] for r in producer_reports)  # slowest producer, first send to last ack
        print(f"2. {args.producers} producer processes sent {total:,} records of {VALUE_SIZE} B "
              f"({failed} failed): {total / sending:,.0f} records/s together while sending "
              f"({total / produced:,.0f} records/s counting process start-up)")

        with KafkaConsumer(bootstrap_servers=bootstrap) as probe:
            end_offsets = probe.end_offsets([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        targets = {tp.partition: offset for tp, offset in end_offsets.items()}
        for queue in ends:
            queue.put(targets)
        consumer_reports = _reports(results, args.consumers, "consumer")
        elapsed = time.perf_counter() - started
        seen = sum(r[2].astype(np.int64) for r in consumer_reports)
        out_of_order = sum(r[3] for r in consumer_reports)
        missing, duplicated = int((seen == 0).sum()), int((seen > 1).sum())
        print(f"3. {args.consumers} consumer processes read {int(seen.sum()):,} records; "
              f"end offsets "
              f"{[targets[p] for p in range(PARTITIONS)]} (sum {sum(targets.values()):,})")
        print(f"4. exactly once: {missing} missing, {duplicated} duplicated; "
              f"in order per partition: "
              f"{out_of_order} out of order; end to end {total / elapsed:,.0f} records/s")
        for process in processes:
            process.join(timeout=60)
        problems += [f"{n} {what}" for n, what in (
            (failed, "sends failed"), (missing, "records missing"),
            (duplicated, "records duplicated"), (out_of_order, "records out of order"))
            if n]
        if sum(targets.values()) != total:
            problems.append(f"the end offsets sum to {sum(targets.values()):,}, not {total:,}")

        counts, start_up, counting, spark_processes = spark_counts(bootstrap)
        expected = expected_counts(args.producers, args.records)
        wrong = sorted(k for k in set(counts) | set(expected) if counts.get(k) != expected.get(k))
        per_producer = {p: sum(counts.get(k, 0) for k in expected if k.startswith(b"p%d-" % p))
                        for p in range(args.producers)}
        verdict = ("equal to what the producers sent" if not wrong else
                   f"DIFFERENT from what the producers sent for {len(wrong)} keys, e.g. "
                   f"{wrong[:3]}")
        print(f"5. Spark (local[2]) read the topic through spark.read.format(\"ringlog\") and "
              f"counted {sum(counts.values()):,} records over {len(counts):,} keys "
              f"(groupBy(key).count()) in {counting:.1f} s, after {start_up:.1f} s of Spark "
              f"start-up;\n   counts per key {verdict}; per producer {per_producer}")
        if wrong:
            problems.append(f"Spark's counts differ for {len(wrong)} keys")
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join(timeout=10)
        if sampler is not None:
            sampler.stop()  # before the cluster stops: its pages go with it
        cluster.stop()
    left = list_objects(cluster.cluster_id) if cluster.cluster_id else []
    running = [pid for pid in list(broker_pids.values()) + [p.pid for p in processes]
               if pid and _alive(pid)]
    running += [p.pid for p in psutil.wait_procs(spark_processes, timeout=30)[1]]
    print(f"6. Spark and the cluster stopped: {len(running)} of its processes still running, "
          f"{len(left)} shared-memory objects left")
    if running:
        problems.append(f"processes {running} still running")
    if left:
        problems.append(f"{len(left)} shared-memory objects left, e.g. {left[0]}")
    if sampler is not None:
        print(f"7. per process, from the stats pages read every {SAMPLE_INTERVAL:g} s:")
        print(report.process_table(sampler.samples), flush=True)
    return problems


def _reports(results, count, what, timeout=300):
    """``count`` reports of the ``what`` processes from the ``results`` queue; TimeoutError
    saying how many came if they do not all come within ``timeout`` seconds."""
    reports = []
    deadline = time.monotonic() + timeout
    while len(reports) < count:
        try:
            reports.append(results.get(timeout=max(0.0, deadline - time.monotonic())))
        except queue.Empty:
            raise TimeoutError(f"{len(reports)} of {count} {what} processes reported within "
                               f"{timeout} s") from None
    return reports


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
