"""One case of a workload: spawn the client processes of one peer, start them together,
collect what each measured, stop every one of them by pid whatever happens.

::

    parent (this module)                     client processes (fork server's children)
    -------------------                      --------------------------
    deploy -> endpoint
    start consumers, then producers  ---->   connect, prepare payloads
                                      <----  ("ready", role, index)
    consumers ready: set "listening" ---->   (pyzmq producers connect only now)
    all ready: set the start event   ---->   producers send, consumers read
    sample the servers' RSS (psutil)         each consumer adds its count to a shared slot
                                             and stops when the slots sum to the total
                                      <----  ("done", "consumer", index, figures)
    consumers done: set "finished"   ---->   (pyzmq producers close their sockets only now)
                                      <----  ("done", "producer", index, figures)
    join; kill (SIGKILL, by pid) whatever is still alive; deployment.stop()

Client processes come from a multiprocessing fork server that imported numpy and every
peer's client library once (``PRELOAD``): a case starts its clients in a fraction of a
second instead of an import each, and every client carries the same libraries.

Times are CLOCK_MONOTONIC nanoseconds, which every process on the host shares, so a
producer's first send and a consumer's last receive can be subtracted. Process start-up and
connection set-up happen before the start event and are not measured.

Owner: the suite's main thread; ``run_case`` is not reentrant.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import queue
import time
import traceback

import numpy as np
import psutil

from perf.suite import peers

CTX = multiprocessing.get_context("forkserver")
#: Imported once by the fork server, so each client process starts with them loaded (the
#: clients of every peer then carry the same libraries: their RSS figures compare).
PRELOAD = ["numpy", "psutil", "perf.suite.harness", "perf.suite.latency",
           "perf.suite.payloads", "cluster.producer.kafka_producer", "consumer_proc.consumer",
           "redis", "zmq"]
CTX.set_forkserver_preload(PRELOAD)
#: Seconds a client process may take to start, connect and say it is ready.
READY_TIMEOUT = 90.0
#: Seconds between two samples of the servers' RSS.
SAMPLE_INTERVAL = 0.1
#: Seconds a finished client gets to exit before it is killed.
EXIT_GRACE = 5.0


@dataclasses.dataclass(frozen=True)
class Task:
    """What one client process does.

    ``role``: "producer" or "consumer"; ``index``: its number within the role;
    ``channels``: the channel numbers it writes to / reads from; ``records``: for a
    producer, the records it sends; for a consumer, the records all consumers together
    read before they stop; ``size``: value bytes; ``bulk``: use the peer's bulk path;
    ``rate``: records/s of a fixed-rate (latency) producer, 0 for as fast as it goes;
    ``timeout``: seconds after the start before the client gives up; ``acks``: "1" or
    "all", for peers that acknowledge (ringlog); ``group``: the consumers share the
    channels as one consumer group (ringlog's subscribe with a group_id; peers whose
    consumers always read in a group, or never can, ignore it).
    """

    role: str
    index: int
    channels: tuple
    records: int
    size: int
    bulk: bool = False
    rate: float = 0.0
    timeout: float = 60.0
    acks: str = "1"
    group: bool = False

    @property
    def latency(self):
        return self.rate > 0


class Gate:
    """A client process's side of the harness: ``ready()`` then the shared counters.

    Owned by the client process's main thread."""

    def __init__(self, task, events, counts, reports):
        self.task = task
        self._start, self._listening, self._finished = events
        self._counts = counts
        self._reports = reports
        self._slots = np.frombuffer(counts, dtype=np.int64) if counts is not None else None
        self.deadline = None

    def ready(self):
        """Say this client is set up, then block until every client is (the start)."""
        self._reports.put(("ready", self.task.role, self.task.index, None))
        if not self._start.wait(READY_TIMEOUT * 2):
            raise TimeoutError(f"{self.task.role} {self.task.index}: no start signal within "
                               f"{READY_TIMEOUT * 2:.0f} s")
        self.deadline = time.monotonic() + self.task.timeout

    def wait_consumers(self):
        """Producer: block until every consumer is ready (for peers whose consumers must
        listen before producers connect: pyzmq's PULL binds)."""
        if not self._listening.wait(READY_TIMEOUT):
            raise TimeoutError(f"producer {self.task.index}: consumers not ready within "
                               f"{READY_TIMEOUT:.0f} s")

    def wait_finished(self):
        """Producer: block until every consumer is done (for peers that may drop what is
        in flight when a sender closes: pyzmq's PUSH)."""
        if not self._finished.wait(self.task.timeout + READY_TIMEOUT):
            raise TimeoutError(f"producer {self.task.index}: consumers not done within "
                               f"{self.task.timeout + READY_TIMEOUT:.0f} s")

    def expired(self):
        return time.monotonic() >= self.deadline

    def received(self, count):
        """Consumer: it has read ``count`` records so far; True once all consumers together
        read the total (``task.records``)."""
        self._slots[self.task.index] = count
        return int(self._slots.sum()) >= self.task.records


def peak_rss():
    """This process's peak RSS in bytes (VmHWM: unlike ru_maxrss it starts afresh at
    exec, so a spawned client does not inherit the parent's size)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM line in /proc/self/status")


def _client_main(peer_name, endpoint, task, events, counts, reports):
    """A client process's entry point: run the peer's loop, report its figures."""
    try:
        module = peers.load(peer_name)
        run = module.produce if task.role == "producer" else module.consume
        figures = run(endpoint, task, Gate(task, events, counts, reports))
        figures["peak_rss"] = peak_rss()
        reports.put(("done", task.role, task.index, figures))
    except BaseException:  # noqa: B036 -- the parent must hear of any failure, then we exit
        reports.put(("error", task.role, task.index, traceback.format_exc(limit=6)))


@dataclasses.dataclass
class CaseRun:
    """What one run of a case measured: each client's figures, the servers' peak RSS."""

    producers: list
    consumers: list
    server_peak_rss: int
    server_processes: int


class CaseFailed(Exception):
    """A client failed or the case ran out of time; the message says which and why."""


def run_case(peer_name, deployment, tasks, timeout, on_tick=None):
    """Run ``tasks`` (consumers first in the list is not required) against
    ``deployment``; return a CaseRun, or raise CaseFailed. ``on_tick()`` is called about
    every SAMPLE_INTERVAL while waiting (the progress display)."""
    consumers = [t for t in tasks if t.role == "consumer"]
    counts = CTX.RawArray("q", max(1, len(consumers)))
    start, listening, finished = events = CTX.Event(), CTX.Event(), CTX.Event()
    reports = CTX.Queue()
    processes = []
    sampler = RssSampler(deployment.server_pids())
    try:
        for task in sorted(tasks, key=lambda t: t.role != "consumer"):
            process = CTX.Process(target=_client_main, name=f"bench-{task.role}-{task.index}",
                                  args=(peer_name, deployment.endpoint, task, events,
                                        counts, reports), daemon=True)
            process.start()
            processes.append(process)
        _collect(reports, processes, "ready", len(tasks), time.monotonic() + READY_TIMEOUT,
                 sampler, on_tick, on_consumers=listening.set, consumers=len(consumers))
        start.set()
        done = _collect(reports, processes, "done", len(tasks), time.monotonic() + timeout,
                        sampler, on_tick, on_consumers=finished.set, consumers=len(consumers))
        sampler.sample()
        return CaseRun(producers=[f for (role, _), f in sorted(done.items())
                                  if role == "producer"],
                       consumers=[f for (role, _), f in sorted(done.items())
                                  if role == "consumer"],
                       server_peak_rss=sampler.peak, server_processes=len(sampler.pids))
    finally:
        stop_processes(processes)
        reports.close()
        reports.join_thread()


def _collect(reports, processes, kind, expected, deadline, sampler, on_tick, on_consumers,
             consumers):
    """Wait for ``expected`` reports of ``kind``; an error report, a client that died
    silently or the deadline raise CaseFailed. ``on_consumers()`` is called once
    ``consumers`` consumers reported."""
    got = {}
    while len(got) < expected:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            waiting = expected - len(got)
            raise CaseFailed(f"{waiting} of {expected} clients not {kind} in time")
        try:
            status, role, index, payload = reports.get(timeout=min(SAMPLE_INTERVAL, remaining))
        except queue.Empty:
            sampler.sample()
            if on_tick is not None:
                on_tick()
            dead = [p for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise CaseFailed(f"client {dead[0].name} (pid {dead[0].pid}) exited with code "
                                 f"{dead[0].exitcode} before it reported") from None
            continue
        if status == "error":
            raise CaseFailed(f"{role} {index} failed:\n{payload}")
        if status == kind:
            got[role, index] = payload
            if role == "consumer" and \
                    sum(1 for r, _ in got if r == "consumer") == consumers:
                on_consumers()
    return got


def stop_processes(processes, grace=EXIT_GRACE):
    """Join each process; SIGKILL (by pid) those still alive after ``grace`` s overall."""
    deadline = time.monotonic() + grace
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join(5.0)


class RssSampler:
    """Peak of the summed RSS of ``pids`` (the servers of a case), sampled with psutil."""

    def __init__(self, pids):
        self.pids = list(pids)
        self._processes = [psutil.Process(pid) for pid in self.pids]
        self.peak = 0

    def sample(self):
        total = 0
        for process in self._processes:
            try:
                total += process.memory_info().rss
            except psutil.Error:
                continue
        self.peak = max(self.peak, total)
