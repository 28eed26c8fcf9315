"""Latency at a fixed rate (workload 4): a paced sender that stamps each value, a recorder in
the receiving process, percentiles and a histogram.

Each value starts with its send time, CLOCK_MONOTONIC ns (shared by every process on the
host), taken just before the peer's send call::

    0          8                          size
    +----------+--------------------------+
    | sent ns  | payload (upper-case)     |      sent ns: little-endian int64
    +----------+--------------------------+

The receiver takes the clock once per receive call (a poll, a read, a get) and records
``received - sent`` for each value it returned. The sender is open loop: record ``i`` is due
at ``start + i / rate``; it sleeps when it is early and sends at once when late, so a slow
peer shows up as latency, not as a lower rate (the achieved rate is reported too). The first
``WARMUP`` records of every peer are left out (connections and caches warming).

Pure functions and small per-process objects: a Pacer or Recorder belongs to the process
(and thread) that made it.
"""
from __future__ import annotations

import struct
import time

import numpy as np

STAMP = struct.Struct("<q")
#: Records left out at the start of every latency run.
WARMUP = 50
#: Shortest wait the pacer sleeps for; shorter ones are spun through.
MIN_SLEEP = 50e-6
PERCENTILES = {"p50": 50.0, "p99": 99.0, "p99.9": 99.9}
#: Histogram bins: log-spaced from 1 µs to 10 s.
HISTOGRAM_EDGES_US = np.logspace(0, 7, 71)


def clock_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class Pacer:
    """Open-loop pacing at ``rate`` records/s from the first ``wait(0)``."""

    def __init__(self, rate, clock=time.monotonic, sleep=time.sleep):
        self.interval = 1.0 / rate
        self._clock = clock
        self._sleep = sleep
        self._start = None

    def wait(self, i):
        """Return when record ``i`` is due."""
        now = self._clock()
        if self._start is None:
            self._start = now
        ahead = self._start + i * self.interval - now
        if ahead > MIN_SLEEP:
            self._sleep(ahead)
        while self._start + i * self.interval > self._clock():
            pass


def stamped_value(size):
    """A reusable value buffer of ``size`` bytes (at least the stamp)."""
    if size < STAMP.size:
        raise ValueError(f"latency values need at least {STAMP.size} bytes, found {size}")
    return bytearray(b"L" * size)


def stamp(buffer):
    """Write the send time into ``buffer``; return the value as bytes."""
    STAMP.pack_into(buffer, 0, clock_ns())
    return bytes(buffer)


class Recorder:
    """Latencies (ns) of up to ``capacity`` records, in arrival order."""

    def __init__(self, capacity):
        self.latencies = np.zeros(capacity, dtype=np.int64)
        self.count = 0

    def record(self, values, received_ns):
        """``values``: the values one receive call returned (bytes-like, stamped)."""
        unpack = STAMP.unpack_from
        n = min(len(values), len(self.latencies) - self.count)
        out = self.latencies
        base = self.count
        for i in range(n):
            out[base + i] = received_ns - unpack(values[i])[0]
        self.count += n

    def result(self):
        return self.latencies[:self.count]


def send_paced(send, task, gate):
    """A peer's workload-4 sender: ``task.records`` values of ``task.size`` bytes, each
    stamped just before ``send(value)``, paced at ``task.rate``; ``gate.ready()`` first.
    Returns the clock (ns) at the first send."""
    buffer = stamped_value(task.size)
    pacer = Pacer(task.rate)
    gate.ready()
    first = clock_ns()
    for i in range(task.records):
        pacer.wait(i)
        send(stamp(buffer))
    return first


def receiver_figures(count, first_ns, last_ns, recorder):
    """What a peer's consumer returns: records received, the clock at the first and last
    receive, and the latencies when it recorded them (``recorder``, or None)."""
    figures = {"records": count, "first_ns": first_ns, "last_ns": last_ns}
    if recorder is not None:
        figures["latencies_ns"] = recorder.result()
    return figures


def summarize(latencies_ns):
    """Percentiles (µs), mean, the histogram over HISTOGRAM_EDGES_US and the count, of the
    latencies after WARMUP."""
    kept = np.asarray(latencies_ns, dtype=np.int64)[WARMUP:]
    if not len(kept):
        return {"records": 0}
    micros = kept / 1000.0
    summary = {name: float(np.percentile(micros, q)) for name, q in PERCENTILES.items()}
    counts, _ = np.histogram(np.clip(micros, HISTOGRAM_EDGES_US[0], HISTOGRAM_EDGES_US[-1]),
                             bins=HISTOGRAM_EDGES_US)
    summary.update(records=int(len(kept)), mean=float(micros.mean()),
                   max=float(micros.max()),
                   histogram={"edges_us": HISTOGRAM_EDGES_US.tolist(),
                              "counts": counts.tolist()})
    return summary
