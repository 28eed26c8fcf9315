"""The bridge: one Spark streaming query from a ringlog topic, through an optional
DataFrame transformation, into a sink — run by ``ringlog spark-bridge``.

::

    spark.readStream.format("ringlog")
         .option("bootstrap.servers", D).option("subscribe", T)   # + startingOffsets, ...
         .load()
      -> transform(df)                                             # --transform module:function
      -> .writeStream.format("parquet").option("path", DIR)        # --sink parquet:DIR
         .option("checkpointLocation", CHECKPOINT)                 # --checkpoint
         .trigger(processingTime=...) or .trigger(availableNow=True)

Exactly once, by Spark's design: before a micro-batch runs, Spark writes its offset range
to ``CHECKPOINT/offsets/<batch id>``; the file sink commits the batch's files in one step
(``sink_log``); then Spark marks the batch done in ``CHECKPOINT/commits/<batch id>``. A
bridge killed at any point and started again runs the last planned batch again over the
same offsets — the ringlog source returns the same rows for the same range — and the sink
skips a batch it already committed. Progress lives in the checkpoint, nowhere else (with
two files of the bridge's own there: the starting offsets "latest" was pinned to,
``starting_offsets``, and the JVM to wait for after a kill, ``jvm``).

The bridge prints one line per micro-batch, as Kafka's tools print progress (Spark's own
logging is turned down to errors), and a summary when it stops: on SIGTERM or Ctrl-C
(the query is stopped — an interrupted batch is not committed and runs again next time —
then Spark, and the bridge exits 0, its last line saying where the checkpoint stands and
the command that resumes: ``stop_line``), or by itself with ``--available-now`` once everything
committed when it started is in the sink. A SIGTERM sent to the bridge's whole process
group (``timeout``, a service manager) reaches Spark's JVM too, whose own shutdown hook
stops the query; the bridge then only waits for the JVM and exits 0 as well (Spark logs
the tasks it interrupted). A query that fails ends the bridge with exit code 1 and Spark's
error.

Owner: the bridge process's main thread (``run``); ``request_stop`` is what a signal
handler calls. Progress lines come from Spark's listener thread.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time

from spark_bridge import jvm
from spark_bridge.checkpoint_log import read_progress
from spark_bridge.options import ISOLATION_LEVEL, ISOLATION_LEVELS
from spark_bridge.session import get_spark
from spark_bridge.starting_offsets import pin_starting_offsets, resumes
from spark_bridge.transform import apply_transform

#: The file in the checkpoint directory naming the bridge's JVM (``jvm.record_processes``).
PROCESSES_FILE = "bridge-processes"
#: Seconds between two checks of the query's state by the main thread.
POLL_INTERVAL = 0.25


@dataclasses.dataclass(frozen=True)
class BridgeConfig:
    """What one bridge runs. ``trigger_ms``: micro-batch interval in milliseconds (None:
    Spark's default, each batch as soon as the previous one ends); ``available_now``:
    process what is committed at start, then stop. ``source_options``: further options of
    the ringlog source by Spark's names (startingOffsets, maxOffsetsPerTrigger, ...).
    ``transform``: the loaded function, ``transform_spec`` its ``module:function``.
    ``resume_command``: the command line that runs this bridge again (printed on a stop)."""

    bootstrap_servers: str
    topic: str
    sink: object
    checkpoint: str
    trigger_ms: int = None
    available_now: bool = False
    source_options: dict = dataclasses.field(default_factory=dict)
    transform: object = None
    transform_spec: str = None
    master: str = "local[2]"
    spark_conf: dict = dataclasses.field(default_factory=dict)
    resume_command: str = None


class Bridge:
    """One bridge run: ``run()`` starts Spark and the query, waits until the query ends or
    ``request_stop()`` is called, then stops the query and Spark and returns the exit
    code. Owned by the main thread; ``request_stop`` may be called from a signal
    handler. Lines go to ``out``."""

    def __init__(self, config, out=None, clock=time.monotonic):
        self.config = config
        self.out = sys.stdout if out is None else out
        self._clock = clock
        self._stop = threading.Event()
        self._lock = threading.Lock()  # guards the totals below (written by the listener)
        self._rows = 0
        self._batches = 0
        self._end_offsets = None
        self._started = None
        self._source_options = None
        self.spark = None
        self.query = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self):
        """Start Spark and the streaming query (after any JVM of an earlier bridge on this
        checkpoint has exited). ``run`` calls it."""
        os.makedirs(self.config.checkpoint, exist_ok=True)
        processes_file = os.path.join(self.config.checkpoint, PROCESSES_FILE)
        jvm.wait_for_recorded(processes_file, on_wait=self._print_waiting)
        self._started = self._clock()
        self._source_options = dict(self.config.source_options)
        if resumes(self.config.checkpoint):
            start_text = "where its checkpoint ends"
        else:
            start_text = self._source_options["startingOffsets"] = pin_starting_offsets(
                self.config.checkpoint, self.config.bootstrap_servers, self.config.topic,
                self._source_options.get("startingOffsets"),
                self._source_options.get(ISOLATION_LEVEL, ISOLATION_LEVELS[0]))
        self.spark = get_spark("ringlog-spark-bridge", self.config.master, self.config.spark_conf)
        jvm.record_processes(processes_file, jvm.spark_processes())
        self.spark.streams.addListener(_ProgressListener(self))
        self.query = self._build_query().start()
        self._print(f"spark-bridge: query {self.query.id} from topic {self.config.topic!r} to "
                    f"{self.config.sink}, checkpoint {self.config.checkpoint}, "
                    f"{self._trigger_text()}, starting at {start_text} (Spark started in "
                    f"{self._clock() - self._started:.1f} s)")

    def request_stop(self):
        """Ask ``run()`` to stop the query (signal-safe)."""
        self._stop.set()

    def run(self):
        """Start; wait for the query to end or a stop request; stop the query and Spark (and
        wait for its JVM to exit); print the summary. Returns 0, or 1 when Spark or the
        query failed (its error printed to stderr)."""
        failure = None
        stats = _bridge_stats(self.config.bootstrap_servers)
        try:
            self.start()
            while not self._stop.is_set() and self.query.isActive:
                self._stop.wait(POLL_INTERVAL)
            if self._stop.is_set():  # the tasks stop() interrupts are expected: no ERROR logs
                self.spark.sparkContext.setLogLevel("OFF")
            self.query.stop()
            exception = self.query.exception()
            if exception is not None:
                failure = jvm.error_text(exception)  # while the JVM, which formats it, runs
        except Exception as exc:  # Spark's error, e.g. a source option it refused
            failure = self._failure_of(exc)
        finally:
            if self.spark is not None:
                jvm.stop_spark(self.spark)
            stats.close()
        if failure is not None:
            print(f"spark-bridge: the query failed: {failure}", file=sys.stderr, flush=True)
        with self._lock:
            elapsed = 0.0 if self._started is None else self._clock() - self._started
            self._print(f"Processed a total of {self._rows} rows in {self._batches} batches "
                        f"in {elapsed:.1f} s; end offsets {_offsets_text(self._end_offsets)}")
        if self._stop.is_set():
            self._print(stop_line(read_progress(self.config.checkpoint),
                                  self.config.resume_command))
        return 1 if failure is not None else 0

    def _failure_of(self, exc):
        """What to report for ``exc``: None when a stop was asked for and Spark's JVM exits
        by itself — the signal reached the JVM too (sent to the whole process group), whose
        shutdown hook stopped Spark under the bridge's feet."""
        if self._stop.is_set() and self.spark is not None and jvm.exits(jvm.EXIT_TIMEOUT):
            return None
        return jvm.error_text(exc)

    # -- the query ------------------------------------------------------------------------------

    def _build_query(self):
        config = self.config
        reader = (self.spark.readStream.format("ringlog")
                  .option("bootstrap.servers", config.bootstrap_servers)
                  .option("subscribe", config.topic))
        for name, value in self._source_options.items():
            reader = reader.option(name, value)
        df = reader.load()
        if config.transform is not None:
            df = apply_transform(config.transform, config.transform_spec, df)
        writer = (df.writeStream.format(config.sink.format)
                  .option("checkpointLocation", config.checkpoint)
                  .queryName("ringlog_spark_bridge"))
        if config.sink.path is not None:
            writer = writer.option("path", config.sink.path)
        if config.available_now:
            writer = writer.trigger(availableNow=True)
        elif config.trigger_ms is not None:
            writer = writer.trigger(processingTime=f"{config.trigger_ms} milliseconds")
        return writer

    def _trigger_text(self):
        if self.config.available_now:
            return "trigger available-now"
        if self.config.trigger_ms is None:
            return "trigger: each batch when the previous ends"
        return f"trigger every {self.config.trigger_ms} ms"

    # -- progress -------------------------------------------------------------------------------

    def _on_progress(self, progress):
        """One micro-batch wrote to the sink: count it and print its line."""
        rows = progress.numInputRows
        end = _parse_offsets(progress.sources[0].endOffset) if progress.sources else None
        with self._lock:
            self._rows += rows
            self._batches += 1
            self._end_offsets = end
        millis = progress.durationMs.get("triggerExecution", 0)
        rate = rows * 1000 / millis if millis else 0.0
        self._print(f"batch {progress.batchId}: {rows} rows in {millis} ms "
                    f"({rate:,.0f} rows/s), end offsets {_offsets_text(end)}")

    def _print_waiting(self, processes):
        self._print(f"spark-bridge: waiting for processes {[p.pid for p in processes]} of an "
                    f"earlier bridge on {self.config.checkpoint} to exit")

    def _print(self, line):
        print(line, file=self.out, flush=True)


class _ProgressListener:
    """Spark's StreamingQueryListener for one Bridge; Spark calls it on its listener thread.
    Built lazily as a subclass of pyspark's class (pyspark is imported only once Spark is
    wanted)."""

    def __new__(cls, bridge):
        from pyspark.sql.streaming import StreamingQueryListener

        class ProgressListener(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryProgress(self, event):
                if "addBatch" in event.progress.durationMs:  # the batch wrote to the sink
                    bridge._on_progress(event.progress)

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                pass

        return ProgressListener()


def stop_line(progress, resume_command):
    """The line a bridge stopped by a signal prints: where its query stopped (checkpoint_log's
    Progress) and the command that goes on from there."""
    if progress.committed is None:
        where = "stopped before any micro-batch was committed"
    else:
        where = (f"stopped after batch {progress.committed}, committed up to offsets "
                 f"{_offsets_text(progress.end_offsets)}")
    if progress.planned is not None and progress.planned != progress.committed:
        where += f" (batch {progress.planned} was interrupted: it runs again first)"
    return f"spark-bridge: {where}; resume with: {resume_command}"


def _parse_offsets(raw):
    return json.loads(raw) if isinstance(raw, str) else raw


def _offsets_text(offsets):
    return "none" if offsets is None else json.dumps(offsets, separators=(",", ":"))


def _bridge_stats(bootstrap_servers):
    """This process's stats page, role "bridge" (``cluster.stats``), held for the run; a
    registration that does nothing when the servers name no cluster (the query fails and
    says why)."""
    from cluster.client.kafka_client import locate_cluster
    from cluster.errors import NoBrokersAvailable
    from cluster.metadata import data_dir as dd
    from cluster.stats.publisher import StatsRegistration, process_stats, set_process_role

    set_process_role("bridge", f"bridge-{os.getpid()}")
    servers = [s.strip() for s in bootstrap_servers.split(",") if s.strip()]
    try:
        data_dir, cluster_id = locate_cluster(servers)
    except NoBrokersAvailable:
        return StatsRegistration(None)
    return process_stats(dd.read_shm_namespace(data_dir, cluster_id), "bridge",
                         f"bridge-{os.getpid()}")
