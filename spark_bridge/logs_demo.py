"""`make demo-logs`: application logs in, alerts out — ``ringlog ship`` and the ``ringlog``
Spark sink on a 3-broker cluster, checked.

1. Start a 3-broker cluster in a fresh directory; topics ``logs`` (3 partitions) and
   ``alerts`` (1 partition), replication 3.
2. Start one writer process per service (``--services``, 6): each appends log lines
   ``<event time> <LEVEL> <service> seq=<n> ...`` to ``LOGS/<service>.log``, one 10-second
   event-time window after another (event times are the demo's own, from 2026-01-01T00:00Z,
   so a run does not wait for real windows), with logrotate-style renames
   (``x.log.1`` -> ``x.log.2`` ..., ``x.log`` -> ``x.log.1``, a new ``x.log``; no copy
   deleted) and, for the
   first service, one ``copytruncate`` instead. Some windows of each service carry an
   error burst (``BURST_ERRORS`` ERROR lines); the others at most ``QUIET_ERRORS_MAX``.
3. ``ringlog ship --path 'LOGS/*.log*' --key '{service}'`` ships them to ``logs``; it is
   SIGKILLed twice while the writers write and restarted on its checkpoint each time. When
   the writers are done it is stopped (SIGTERM) and ``ringlog ship --once`` ships what is
   left.
4. A Spark Structured Streaming job, started (and through its first micro-batch) before the
   writers and the shipper, reads ``logs`` with ``format("ringlog")`` (restarted on its
   checkpoint if it dies, at most ``SPARK_RESTARTS`` times in all: the sink keeps the alerts
   exactly once), parses the lines,
   drops lines shipped twice (within the watermark, by service and sequence number),
   counts ERROR lines per service per 10-second event-time window with a 10-second
   watermark, and writes one alert per (service, window)
   with at least ``THRESHOLD`` errors to ``alerts`` through the ``ringlog`` sink (exactly
   once per micro-batch). A last line per service far past the last window moves the
   watermark so every window closes.
5. Check, and print as a table: every line written is in ``logs`` at least once, and each
   extra copy lies after the checkpoint the shipper had when it was killed (what a crash may
   re-send); ``alerts``, read with read_committed, holds exactly one alert per injected
   burst and none for a quiet window.
6. Stop Spark, the shipper and the cluster; nothing may be left running or in /dev/shm.

The last line is ``demo passed`` or ``demo FAILED: <reason>``; the exit code 0 or 1.
``--small`` is the size ``make test`` runs.
"""
from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import psutil

from cluster import Cluster, KafkaAdminClient, KafkaConsumer, NewTopic, TopicPartition
from cluster.tools.ship import checkpoint as ship_checkpoint
from shm_ring import list_objects
from spark_bridge import jvm

CTX = multiprocessing.get_context("spawn")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOGS, ALERTS = "logs", "alerts"
WINDOW_SECONDS = 10
LINES_PER_WINDOW = 40
BURST_ERRORS = 12
QUIET_ERRORS_MAX = 2
THRESHOLD = 5
#: The demo's event time starts here (UTC seconds of 2026-01-01T00:00:00Z).
T0 = int(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).timestamp())
#: Times the Spark job is restarted on its checkpoint when it dies (on a loaded machine
#: Spark's Python workers may miss Spark's 10-second connect-back deadline).
SPARK_RESTARTS = 2
LINE = re.compile(rb"^(\S+) (\w+) (\S+) seq=(\d+) ")


def service_name(index):
    return f"svc{index}"


def is_burst(service, window):
    """Whether ``service`` (index) has an error burst in ``window``."""
    return (window + service) % 4 == 1


def error_count(service, window):
    return BURST_ERRORS if is_burst(service, window) else (window + service) % (
        QUIET_ERRORS_MAX + 1)


def _stamp(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _rotate(path):
    """logrotate's renames, every copy kept (``rotate N`` with N above the demo's rotations):
    x.log.k -> x.log.k+1 from the oldest, then x.log -> x.log.1. No copy is deleted: one
    deleted before the shipper read it is lost to any shipper, and the demo's shipper may be
    down for a while (killed twice; restarting on a loaded machine took longer than three
    rotations, when keeping two copies deleted a file nobody had read)."""
    copies = 0
    while os.path.exists(f"{path}.{copies + 1}"):
        copies += 1
    for k in range(copies, 0, -1):
        os.replace(f"{path}.{k}", f"{path}.{k + 1}")
    os.replace(path, path + ".1")


def _copytruncate(path):
    """logrotate's copytruncate: copy x.log to x.log.1, then truncate x.log."""
    shutil.copyfile(path, path + ".1")
    with open(path, "r+b") as file:
        file.truncate(0)


def write_logs(service, log_dir, windows, pace):
    """Writer process: ``windows`` windows of LINES_PER_WINDOW lines, ``pace`` seconds
    apart, rotating every third window (service 0: one copytruncate in the middle); then
    the watermark line. Returns through its exit code only."""
    name = service_name(service)
    path = os.path.join(log_dir, f"{name}.log")
    seq = 0
    file = open(path, "ab", buffering=0)  # noqa: SIM115 - reopened at each rotation
    try:
        for window in range(windows):
            errors = error_count(service, window)
            for j in range(LINES_PER_WINDOW):
                at = T0 + window * WINDOW_SECONDS + j * WINDOW_SECONDS / LINES_PER_WINDOW
                level = "ERROR" if j < errors else "INFO"
                file.write(f"{_stamp(at)} {level} {name} seq={seq} request done\n".encode())
                seq += 1
            time.sleep(pace)
            if window % 3 == 2 and window < windows - 1:
                if service == 0:
                    if window == 2:
                        _copytruncate(path)
                else:
                    file.close()
                    _rotate(path)
                    file = open(path, "ab", buffering=0)  # noqa: SIM115 - closed below
        last = T0 + (windows + 3) * WINDOW_SECONDS
        file.write(f"{_stamp(last)} INFO {name} seq={seq} closing the windows\n".encode())
    finally:
        file.close()


def lines_written(services, windows):
    """{(service name, seq)} of every line the writers write."""
    per = windows * LINES_PER_WINDOW + 1
    return {(service_name(s), n) for s in range(services) for n in range(per)}


def expected_alerts(services, windows):
    return {(service_name(s), T0 + w * WINDOW_SECONDS) for s in range(services)
            for w in range(windows) if is_burst(s, w)}


class Shipper:
    """``ringlog ship`` processes started by the demo (one at a time)."""

    def __init__(self, data_dir, log_dir, checkpoint, err_path):
        self.argv = [sys.executable, "-m", "cluster.tools.cli", "ship",
                     "--bootstrap-server", data_dir, "--topic", LOGS,
                     "--path", os.path.join(log_dir, "*.log*"), "--key", "{service}",
                     "--checkpoint", checkpoint, "--rotate-wait", "1",
                     "--progress-interval", "3600"]
        self.checkpoint = checkpoint
        self.err_path = err_path
        self.process = None
        self.kill_checkpoints = []  # the checkpoint on disk at each SIGKILL

    def start(self, *extra):
        with open(self.err_path, "a") as err:
            self.process = subprocess.Popen(self.argv + list(extra), cwd=ROOT,
                                            stdout=subprocess.DEVNULL, stderr=err)

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self.kill_checkpoints.append({entry.id: entry.position for entry in
                                      ship_checkpoint.load(self.checkpoint).values()})

    def stop(self, timeout=60):
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)


def start_alerting(spark, data_dir, checkpoint):
    """The Spark job of step 4; returns the running StreamingQuery."""
    from pyspark.sql import functions as F

    lines = (spark.readStream.format("ringlog").option("bootstrap.servers", data_dir)
             .option("subscribe", LOGS).option("startingOffsets", "earliest").load()
             .select(F.col("value").cast("string").alias("line")))
    pattern = r"^(\S+) (\w+) (\S+) seq=(\d+) "
    parsed = lines.select(
        F.try_to_timestamp(F.regexp_extract("line", pattern, 1),
                           F.lit("yyyy-MM-dd'T'HH:mm:ss.SSSX")).alias("ts"),
        F.regexp_extract("line", pattern, 2).alias("level"),
        F.regexp_extract("line", pattern, 3).alias("service"),
        F.regexp_extract("line", pattern, 4).cast("long").alias("seq"))
    parsed = parsed.where(F.col("ts").isNotNull())  # not a log line: never alerted on
    errors = (parsed.withWatermark("ts", f"{WINDOW_SECONDS} seconds")
              .dropDuplicatesWithinWatermark(["service", "seq"])
              .where(F.col("level") == "ERROR"))
    counts = (errors.groupBy(F.window("ts", f"{WINDOW_SECONDS} seconds"), "service").count()
              .where(F.col("count") >= THRESHOLD))
    alerts = counts.select(
        F.col("service").alias("key"),
        F.to_json(F.struct("service", F.unix_timestamp("window.start").alias("window_start"),
                           "count")).alias("value"))
    return (alerts.writeStream.format("ringlog").outputMode("append")
            .option("kafka.bootstrap.servers", data_dir).option("topic", ALERTS)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="1 second").start())


class DemoError(Exception):
    """A step failed so that the demo cannot go on (its message says which)."""


class AlertingJob:
    """The Spark job of step 4, restarted on its checkpoint when it dies, at most
    ``SPARK_RESTARTS`` times (the sink keeps the alerts exactly once across restarts)."""

    def __init__(self, spark, data_dir, checkpoint):
        self.spark = spark
        self.data_dir = data_dir
        self.checkpoint = checkpoint
        self.restarts = 0
        self.query = start_alerting(spark, data_dir, checkpoint)

    def catch_up(self):
        """Process what ``logs`` holds now, restarting the job each time it dies; the
        reason once it died more often than allowed, else None."""
        while True:
            try:
                self.query.processAllAvailable()
                return None
            except Exception as exc:  # the query died: restarted on its checkpoint
                reason = str(exc).splitlines()[0]
                if self.restarts == SPARK_RESTARTS:
                    return f"the Spark job failed {self.restarts + 1} times, last: {reason}"
                self.restarts += 1
                print(f"   the Spark job failed ({reason}); restarted on its checkpoint "
                      f"({self.restarts} of at most {SPARK_RESTARTS})", flush=True)
                self.query = start_alerting(self.spark, self.data_dir, self.checkpoint)

    def stop(self):
        if self.query.isActive:
            self.query.stop()


def read_all(data_dir, topic, isolation_level="read_uncommitted"):
    """Every record of ``topic`` now: a list of ConsumerRecords."""
    with KafkaConsumer(bootstrap_servers=data_dir, isolation_level=isolation_level,
                       auto_offset_reset="earliest") as consumer:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        records = []
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end in 120 s")
            for batch in consumer.poll(timeout_ms=1000).values():
                records.extend(batch)
        return records


def check_lines(records, written, kill_checkpoints):
    """(unique lines found, duplicates, duplicates not explained by a kill, missing,
    malformed: (start, file path, offset) of each record that is not a whole line)."""
    seen, malformed = {}, []
    for record in records:
        match = LINE.match(record.value)
        if match is None:
            headers = dict(record.headers or ())
            malformed.append((record.value[:40], headers.get("log.file.path", b"").decode(),
                              headers.get("log.offset", b"").decode()))
            continue
        line = (match.group(3).decode(), int(match.group(4)))
        headers = dict(record.headers or ())
        where = (headers.get("log.file.id", b"").decode(),
                 int(headers.get("log.offset", b"-1")))
        seen.setdefault(line, []).append(where)
    duplicates = unexplained = 0
    for copies in seen.values():
        duplicates += len(copies) - 1
        if len(copies) > 1:
            file_id, offset = copies[0]
            if not any(file_id not in cp or cp[file_id] <= offset for cp in kill_checkpoints):
                unexplained += len(copies) - 1
    missing = written - set(seen)
    return len(set(seen) & written), duplicates, unexplained, missing, malformed


def check_alerts(records):
    """{(service, window start): copies} of the alerts."""
    found = {}
    for record in records:
        alert = json.loads(record.value)
        key = (alert["service"], alert["window_start"])
        found[key] = found.get(key, 0) + 1
    return found


def table(rows):
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(str(cell).ljust(width) for cell, width in
                                      zip(row, widths)) for row in rows)


def run(args, work):
    problems = []
    data_dir = os.path.join(work, "data")
    log_dir = os.path.join(work, "logs")
    os.makedirs(log_dir)
    cluster = Cluster(data_dir, brokers=3)
    writers, shipper, spark, job = [], None, None, None
    started = time.monotonic()
    try:
        cluster.start()
        with KafkaAdminClient(bootstrap_servers=data_dir) as admin:
            admin.create_topics([NewTopic(LOGS, 3, 3), NewTopic(ALERTS, 1, 3)])
        print(f"1. a 3-broker cluster in {data_dir}; topics {LOGS} (3 partitions) and "
              f"{ALERTS}, replication 3", flush=True)
        from spark_bridge.session import get_spark

        spark = get_spark(app_name="ringlog-logs-demo",
                          conf={"spark.sql.session.timeZone": "UTC"})
        job = AlertingJob(spark, data_dir, os.path.join(work, "spark-checkpoint"))
        # Its source's Python worker is up before the writers and the shipper start: Spark
        # gives that worker 10 s to connect back, which a burst of process starts on a
        # loaded 2-core machine can exceed (the job then dies and is restarted).
        failure = job.catch_up()
        if failure is not None:
            raise DemoError(failure)
        print(f"2. Spark job started ({time.monotonic() - started:.0f} s): readStream "
              f"format(\"ringlog\") -> ERROR count per service per {WINDOW_SECONDS}-s window "
              f"(watermark {WINDOW_SECONDS} s) -> writeStream format(\"ringlog\") topic "
              f"{ALERTS}", flush=True)
        shipper = Shipper(data_dir, log_dir, os.path.join(work, "ship.checkpoint"),
                          os.path.join(work, "ship.err"))
        shipper.start()
        for s in range(args.services):
            writer = CTX.Process(target=write_logs, args=(s, log_dir, args.windows, args.pace),
                                 name=f"writer-{s}")
            writer.start()
            writers.append(writer)
        writing = args.windows * args.pace
        for kill in (1, 2):
            time.sleep(writing / 3)
            shipper.kill()
            shipper.start()
            print(f"3. shipper SIGKILLed ({kill} of 2) and restarted on its checkpoint",
                  flush=True)
        for writer in writers:
            writer.join(300)
            if writer.exitcode != 0:
                problems.append(f"{writer.name} exited with {writer.exitcode}")
        time.sleep(2)  # past --rotate-wait
        shipper.stop()
        shipper.start("--once")
        if shipper.process.wait(300) != 0:
            problems.append(f"ringlog ship --once exited with {shipper.process.returncode}")
        written = lines_written(args.services, args.windows)
        print(f"4. {args.services} writers wrote {len(written):,} lines (rotations, one "
              f"copytruncate); ship --once finished the files", flush=True)
        expected = expected_alerts(args.services, args.windows)
        deadline = time.monotonic() + 240
        alerts = {}
        while time.monotonic() < deadline:
            failure = job.catch_up()
            if failure is not None:
                problems.append(failure)
                break
            alerts = check_alerts(read_all(data_dir, ALERTS, "read_committed"))
            if set(alerts) >= expected:
                break
            time.sleep(2)  # no-data micro-batches move the watermark
        job.stop()
        unique, duplicates, unexplained, missing, malformed = check_lines(
            read_all(data_dir, LOGS), written, shipper.kill_checkpoints)
        wrong = {k: n for k, n in alerts.items() if k not in expected}
        repeated = {k: n for k, n in alerts.items() if n > 1}
        absent = expected - set(alerts)
        rows = [("check", "expected", "found", "ok"),
                ("lines in logs (at least once)", f"{len(written):,}", f"{unique:,}",
                 "yes" if not missing else "NO"),
                ("duplicate lines (shipper kills)", "after a kill's checkpoint",
                 f"{duplicates:,} ({unexplained} not)", "yes" if not unexplained else "NO"),
                ("records not a whole line", "0", f"{len(malformed)}",
                 "yes" if not malformed else "NO"),
                ("alerts, one per burst", f"{len(expected)}",
                 f"{sum(alerts.values())} ({len(absent)} missing)",
                 "yes" if not absent and not repeated else "NO"),
                ("alerts for quiet windows", "0", f"{len(wrong)}", "yes" if not wrong else "NO")]
        print("5. checks (alerts read with read_committed):\n" + table(rows), flush=True)
        if missing:
            problems.append(f"{len(missing)} lines never reached {LOGS}, e.g. "
                            f"{sorted(missing)[:3]}")
        if malformed:
            problems.append(f"{len(malformed)} records in {LOGS} are not a whole line "
                            f"(start, file, log.offset): {malformed[:3]}")
        if unexplained:
            problems.append(f"{unexplained} duplicate lines not after a kill's checkpoint")
        if absent:
            problems.append(f"no alert for {len(absent)} bursts, e.g. {sorted(absent)[:3]}")
        if repeated:
            problems.append(f"alerts written more than once: {sorted(repeated.items())[:3]}")
        if wrong:
            problems.append(f"alerts for quiet windows: {sorted(wrong)[:3]}")
    except DemoError as exc:  # the run cannot go on; what it started is stopped below
        problems.append(str(exc))
    finally:
        for writer in writers:
            if writer.is_alive():
                writer.kill()
                writer.join(10)
        if shipper is not None:
            shipper.stop(30)
        if job is not None:
            job.stop()
        spark_processes = []
        if spark is not None:
            spark_processes = jvm.spark_processes()
            jvm.stop_spark(spark)
        # Spark's Python workers first: one still exiting when the cluster stops would leave
        # its stats page behind the stop's sweep of dead processes' pages
        running = [p.pid for p in psutil.wait_procs(spark_processes, timeout=30)[1]]
        cluster.stop()
    left = list_objects(cluster.cluster_id) if cluster.cluster_id else []
    print(f"6. stopped: {len(running)} processes still running, {len(left)} shared-memory "
          f"objects left; wall time {time.monotonic() - started:.0f} s", flush=True)
    if running:
        problems.append(f"processes {running} still running")
    if left:
        problems.append(f"{len(left)} shared-memory objects left, e.g. {left[0]}")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=6)
    parser.add_argument("--windows", type=int, default=12)
    parser.add_argument("--pace", type=float, default=1.0,
                        help="seconds between two windows of a writer")
    parser.add_argument("--small", action="store_true",
                        help="the size make test runs (3 services, 4 windows: each "
                             "service one rotation or copytruncate and one burst)")
    args = parser.parse_args(argv)
    if args.small:
        args.services, args.windows, args.pace = 3, 4, 1.0
    work = tempfile.mkdtemp(prefix="ringlog-logs-demo-")
    try:
        problems = run(args, work)
    except Exception as exc:  # the demo's verdict names it
        traceback.print_exc()
        problems = [f"{type(exc).__name__}: {exc}"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if problems:
        print(f"demo FAILED: {'; '.join(problems)}", flush=True)
        return 1
    print("demo passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
