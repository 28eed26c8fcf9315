"""``ringlog producer-perf-test``: producer throughput and latency, as Kafka's
kafka-producer-perf-test (ProducerPerformance) measures them.

::

    ringlog producer-perf-test --bootstrap-server D --topic T --num-records N
        (--record-size B | --payload-file F [--payload-delimiter S] | --payload-monotonic)
        --throughput R [--producer-props acks=1 linger.ms=5 ...] [--producer.config FILE]
        [--print-metrics] [--bulk [--bulk-records M]]

Sends N records to T — no key, random upper-case payloads of B bytes (or payloads drawn at
random from F's delimited pieces, or the record numbers as text) — at most R records per
second (-1: as fast as the producer goes), then flushes. Every 5 s, and at the end, it
prints Kafka's lines::

    N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency.
    N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency, P50 ms 50th,
        P95 ms 95th, P99 ms 99th, P999 ms 99.9th.                          (one line)

A record's latency runs from its ``send()`` call to its acknowledgement (its batch's
callback, taken on CLOCK_MONOTONIC); only acknowledged records count, MB are payload bytes
(MiB, as Kafka). As in Kafka, the percentiles are whole milliseconds (each latency rounded
down), avg and max are not. Unlike Kafka, every record's latency enters the percentiles
(Kafka samples at most 500,000) and the exit code is 1 when some record failed (the first
error and the count go to stderr).

``--bulk`` is ringlog's own: records go through the producer's bulk path
(``KafkaProducer.send_batch``), ``--bulk-records`` (default 100,000) per call, each record's
latency running from its call to its batch's acknowledgement.

How it stays cheap per record: ``send()`` returns a tuple over the record's batch; the tool
notes the send time in a preallocated array and, once per batch, registers one callback,
so records are grouped into *runs* (consecutive records in one batch). Latencies are
computed per run with numpy when batches complete — in the sending thread, between chunks
of 1,024 sends — never in the producer's sender thread, which only queues (batch, time).
"""
from __future__ import annotations

import collections
import functools
import sys
import time
from array import array

import numpy as np

from cluster.errors import KafkaError, KafkaTimeoutError
from cluster.producer.kafka_producer import KafkaProducer
from cluster.tools.support import (
    FAILED,
    ToolError,
    add_bootstrap_argument,
    client_properties,
    describe,
    fail,
    print_metrics,
    setup_logging,
    stop_on_sigterm,
)
from cluster.tools.throttle import Throttle

#: Records sent between two looks at completed batches (and at the 5-s report).
CHUNK = 1024
#: Records per send_batch call with --bulk, by default.
BULK_RECORDS = 100_000
#: Kafka's reporting interval, in ns.
REPORT_INTERVAL_NS = 5_000_000_000
#: Kafka's percentiles.
PERCENTILES = (0.5, 0.95, 0.99, 0.999)

_MIB = 1024 * 1024
_NS_PER_MS = 1_000_000


def add_arguments(parser):
    add_bootstrap_argument(parser)
    parser.add_argument("--topic", required=True, help="produce records to this topic")
    parser.add_argument("--num-records", type=int, required=True,
                        help="number of records to produce")
    payload = parser.add_mutually_exclusive_group(required=True)
    payload.add_argument("--record-size", type=int, help="payload size in bytes")
    payload.add_argument("--payload-file",
                         help="UTF-8 text file whose delimited pieces are the payloads, "
                              "each record taking one at random")
    payload.add_argument("--payload-monotonic", action="store_true",
                         help="the payload is the record number as text")
    parser.add_argument("--payload-delimiter", default="\\n",
                        help="delimiter of --payload-file (default: newline)")
    parser.add_argument("--throughput", type=float, required=True,
                        help="at most this many records/s; -1 for no limit")
    parser.add_argument("--producer-props", nargs="+", default=[], metavar="KEY=VALUE",
                        help="producer properties (bootstrap.servers, acks, linger.ms, ...)")
    parser.add_argument("--producer.config", dest="producer_config", metavar="FILE",
                        help="producer properties file (--producer-props win)")
    parser.add_argument("--print-metrics", action="store_true",
                        help="print the producer's metrics at the end")
    parser.add_argument("--bulk", action="store_true",
                        help="ringlog: send through the bulk path (send_batch)")
    parser.add_argument("--bulk-records", type=int, default=BULK_RECORDS,
                        help=f"ringlog: records per send_batch call with --bulk "
                             f"(default {BULK_RECORDS})")


def run(args):
    setup_logging()
    try:
        _check(args)
        props = client_properties(
            args.bootstrap_server, args.producer_config, args.producer_props,
            defaults={"client.id": "perf-producer-client"})
        payloads = Payloads.from_args(args)
    except ToolError as exc:
        return fail(exc)
    try:
        producer = KafkaProducer(**props)
    except KafkaError as exc:
        return fail(exc)
    stats = Stats(args.num_records, payloads.size)
    try:
        with stop_on_sigterm():
            throttle = Throttle(args.throughput)
            if args.bulk:
                _send_bulk(producer, args.topic, payloads, stats, throttle, args.bulk_records)
            else:
                _send(producer, args.topic, payloads, stats, throttle)
            _flush(producer, stats)
        stats.print_total()
        if args.print_metrics:
            print_metrics(producer.metrics(), producer.client_id)
    except KafkaError as exc:
        return fail(exc)
    finally:
        producer.close()
    if stats.failed:
        print(f"{stats.failed} records failed; the first error: {describe(stats.first_error)}",
              file=sys.stderr)
        return FAILED
    return 0


def _check(args):
    if args.num_records <= 0:
        raise ToolError(f"--num-records should be greater than zero, found {args.num_records}")
    if args.record_size is not None and args.record_size <= 0:
        raise ToolError(f"--record-size should be greater than zero, found {args.record_size}")
    if args.throughput == 0:
        raise ToolError("--throughput 0 would send nothing; use -1 for no limit")
    if args.bulk_records <= 0:
        raise ToolError(f"--bulk-records should be greater than zero, found "
                        f"{args.bulk_records}")


# -- sending ---------------------------------------------------------------------------------

def _send(producer, topic, payloads, stats, throttle):
    """One ``send()`` per record; a new run whenever a record lands in another batch."""
    send = producer.send
    now = time.monotonic_ns
    times = stats.times
    new_run = stats.new_run
    total = stats.num_records
    pace = throttle.pace if throttle.enabled else None
    current = None
    for lo in range(0, total, CHUNK):
        hi = min(total, lo + CHUNK)
        values, sizes = payloads.chunk(lo, hi, bulk=False)
        if sizes is not None:
            stats.sizes[lo:hi] = sizes
        for i, value in zip(range(lo, hi), values):
            t = now()
            batch = send(topic, value)[0]
            times[i] = t
            if batch is not current:
                current = batch
                new_run(i, batch)
            if pace is not None:
                pace(i + 1)
        stats.collect(hi)


def _send_bulk(producer, topic, payloads, stats, throttle, per_call):
    """``send_batch`` per ``per_call`` records; each batch it makes is a run."""
    total = stats.num_records
    view = stats.view
    for lo in range(0, total, per_call):
        hi = min(total, lo + per_call)
        values, sizes = payloads.chunk(lo, hi, bulk=True)
        if sizes is not None:
            stats.sizes[lo:hi] = sizes
        t = time.monotonic_ns()
        futures = producer.send_batch(topic, values)
        view[lo:hi] = t
        for future in futures:
            batch = future.batch
            stats.new_run(lo + int(batch.record_indices[0]), batch)
        stats.collect(hi)
        throttle.pace(hi)


def _flush(producer, stats):
    """Wait for every acknowledgement, still printing the 5-s lines meanwhile."""
    while True:
        try:
            producer.flush(timeout=REPORT_INTERVAL_NS / 1e9)
            break
        except KafkaTimeoutError:
            stats.collect(stats.num_records)
    stats.collect(stats.num_records)


# -- payloads --------------------------------------------------------------------------------

class Payloads:
    """The payloads of records ``lo`` to ``hi``: ``chunk(lo, hi, bulk)`` -> (values, sizes),
    sizes None when every payload has ``size`` bytes. Values are a list of bytes, or with
    ``bulk`` and a fixed size, rows of a uint8 array."""

    def __init__(self, size=None, pieces=None, monotonic=False, seed=0):
        self.size = size
        self.pieces = pieces
        self.monotonic = monotonic
        self._rng = np.random.default_rng(seed)
        self._pool = None

    @classmethod
    def from_args(cls, args):
        if args.record_size is not None:
            return cls(size=args.record_size)
        if args.payload_monotonic:
            return cls(monotonic=True)
        delimiter = "\n" if args.payload_delimiter == "\\n" else args.payload_delimiter
        print(f"Reading payloads from: {args.payload_file}")
        try:
            with open(args.payload_file, encoding="utf-8") as file:
                text = file.read()
        except OSError as exc:
            raise ToolError(f"cannot read --payload-file {args.payload_file!r}: "
                            f"{exc.strerror}") from None
        pieces = [piece.encode() for piece in text.split(delimiter) if piece]
        if not pieces:
            raise ToolError(f"--payload-file {args.payload_file!r} holds no payload "
                            f"(delimiter {delimiter!r})")
        print(f"Number of messages read: {len(pieces)}")
        return cls(pieces=pieces)

    def chunk(self, lo, hi, bulk):
        count = hi - lo
        if self.size is not None:
            return self._fixed(count, bulk), None
        if self.monotonic:
            values = [b"%d" % i for i in range(lo, hi)]
        else:
            values = [self.pieces[i] for i in self._rng.integers(len(self.pieces),
                                                                size=count).tolist()]
        return values, np.fromiter(map(len, values), dtype=np.int64, count=count)

    def _fixed(self, count, bulk):
        """``count`` random upper-case payloads (Kafka's letters), from a pool made once:
        rows of a uint8 array (bulk) or bytes."""
        if self._pool is None or len(self._pool) < count:
            rows = self._rng.integers(65, 91, size=(max(count, CHUNK), self.size),
                                      dtype=np.uint8)
            self._pool = rows if bulk else [row.tobytes() for row in rows]
        return self._pool[:count]


# -- statistics ------------------------------------------------------------------------------

class Stats:
    """Latencies and rates of one run (Kafka's ProducerPerformance.Stats; module doc).

    The sending thread calls ``new_run`` and ``collect`` and writes ``times`` (send time of
    each record, CLOCK_MONOTONIC ns) and ``sizes``; the producer's sender thread only calls
    the batch callbacks, which append to ``_completed`` (a deque: safe across threads).
    """

    def __init__(self, num_records, size, clock_ns=time.monotonic_ns, out=None):
        self.num_records = num_records
        self.size = size
        self.times = array("q", bytes(8 * num_records))
        self.view = np.frombuffer(self.times, dtype=np.int64)
        self.sizes = None if size is not None else np.zeros(num_records, dtype=np.int64)
        self._clock = clock_ns
        self._out = sys.stdout if out is None else out
        self._run_starts = array("q")
        self._run_batches = []
        self._runs_of = {}                     # batch -> indexes of its runs
        self._completed = collections.deque()  # (batch, done ns or None, error or None)
        self._latencies = []                   # one ns array per acknowledged run
        self.count = self.bytes = self.failed = 0
        self.max_ns = 0
        self.first_error = None
        self.start = self._window_start = clock_ns()
        self._window = [0, 0, 0, 0]            # count, bytes, total ns, max ns

    def new_run(self, first, batch):
        """Records from ``first`` on went into ``batch`` (until the next run)."""
        index = len(self._run_batches)
        self._run_starts.append(first)
        self._run_batches.append(batch)
        runs = self._runs_of.get(batch)
        if runs is not None:
            runs.append(index)
            return
        self._runs_of[batch] = [index]
        batch.done.add_callback(functools.partial(self._acknowledged, batch))
        batch.done.add_errback(functools.partial(self._failed, batch))

    def _acknowledged(self, batch, _result):
        self._completed.append((batch, self._clock(), None))

    def _failed(self, batch, exc):
        self._completed.append((batch, None, exc))

    def collect(self, sent):
        """Account the batches completed so far (``sent``: records whose send time is
        written), and print Kafka's window line when 5 s have passed."""
        completed = self._completed
        starts = self._run_starts
        window = self._window
        while completed:
            batch, done, error = completed.popleft()
            for index in self._runs_of.pop(batch):
                first = starts[index]
                end = starts[index + 1] if index + 1 < len(starts) else sent
                if error is not None:
                    self.failed += end - first
                    self.first_error = self.first_error or error
                    continue
                latencies = done - self.view[first:end]
                nbytes = (end - first) * self.size if self.sizes is None else \
                    int(self.sizes[first:end].sum())
                top = int(latencies.max())
                self._latencies.append(latencies)
                window[0] += end - first
                window[1] += nbytes
                window[2] += int(latencies.sum())
                window[3] = max(window[3], top)
                self.max_ns = max(self.max_ns, top)
        now = self._clock()
        if window[0] and now - self._window_start >= REPORT_INTERVAL_NS:
            self._print_window(now)

    def _print_window(self, now):
        count, nbytes, total_ns, max_ns = self._window
        self.count += count
        self.bytes += nbytes
        elapsed_ms = (now - self._window_start) / _NS_PER_MS
        print(f"{count} records sent, {1000.0 * count / elapsed_ms:.1f} records/sec "
              f"({1000.0 * nbytes / elapsed_ms / _MIB:.2f} MB/sec), "
              f"{total_ns / count / _NS_PER_MS:.1f} ms avg latency, "
              f"{max_ns / _NS_PER_MS:.1f} ms max latency.", file=self._out, flush=True)
        self._window = [0, 0, 0, 0]
        self._window_start = now

    def print_total(self):
        """Kafka's summary line (every record collected)."""
        self.count += self._window[0]
        self.bytes += self._window[1]
        self._window = [0, 0, 0, 0]
        elapsed_ms = max(1e-9, (self._clock() - self.start) / _NS_PER_MS)
        latencies = np.concatenate(self._latencies) if self._latencies else \
            np.zeros(1, dtype=np.int64)
        whole_ms = np.sort(latencies // _NS_PER_MS)
        percentiles = [int(whole_ms[int(p * len(whole_ms))]) for p in PERCENTILES]
        print(f"{self.count} records sent, {1000.0 * self.count / elapsed_ms:f} records/sec "
              f"({1000.0 * self.bytes / elapsed_ms / _MIB:.2f} MB/sec), "
              f"{latencies.mean() / _NS_PER_MS:.2f} ms avg latency, "
              f"{self.max_ns / _NS_PER_MS:.2f} ms max latency, {percentiles[0]} ms 50th, "
              f"{percentiles[1]} ms 95th, {percentiles[2]} ms 99th, {percentiles[3]} ms 99.9th.",
              file=self._out, flush=True)
