"""Where a record's latency goes: per-hop timings of the produce, replication and fetch path.

Run from the repository root::

    .venv/bin/python -m perf.hop_trace [--rf 1|3] [--rate 1000] [--records 2000]

One producer (this process: ``send()`` with linger_ms=0, acks=1 at RF 1, acks=all at RF 3
with min.insync.replicas 2) paced at ``--rate`` records/s, one consumer (a child process,
``poll_batches``), a cluster of 1 (RF 1) or 3 brokers. The brokers run through this module
(``--broker``), which wraps a few broker methods to note the monotonic clock (shared by every
process on the host) at each hop, keyed by record offset; nothing in the brokers' code paths
changes otherwise. Each process writes its notes when it ends; this process joins them and
prints, for each hop, the median and p99 over the records in µs, then the CPU time per record
of every process of the run (psutil).

The hops, for the batch at offset ``i`` (``end``: its end offset, which the leader notes at
the append; a record per batch at low rates):

RF 1 and the leader's part of RF 3::

    P.send        the producer's send() call
    P.written     the Produce request is in the broker's request ring (sender thread)
    L.wake        the leader's loop woke from its doorbell wait (last wake before the append)
    L.produce     the leader's produce handler started
    L.append      the leader's log append returned
    L.respond     the produce response was written (at once, or from the purgatory)
    P.ack         the producer handled the response (the future's callback)
    L.consumer    the consumer's (parked) fetch at offset i was answered
    C.recv        the consumer read the response frame that brought the record (its last
                  read before the poll returned: the wake-up is before, its own work after)
    C.polled      the consumer's client poll returned after that read (the response
                  decoded, its future completed: the fetcher's handling)
    C.fetched     the consumer's next Fetch was written after that (``send_fetches``
                  returned; its doorbell post included)
    C.poll        poll_batches() returned the record in the consumer process

acks=all, per follower ``b<id>``::

    L.fetch_out.b   the follower's parked fetch at offset i was answered by the leader
    F.wake.b        the follower's loop woke (last wake before it read the answer)
    F.recv.b        the follower's fetcher read the answer
    F.append.b      its log append returned
    F.next.b        its next fetch (offset end) was written
    L.fetch_in.b    the leader read that fetch (the follower's new log end offset)
    L.hw            the leader's high watermark reached end

A hop missing for a batch (a follower's fetch answered with two batches, say) leaves that
batch out of that hop's figures only; the counts are printed. The figures per hop are per
batch; "P.send -> P.ack" and "P.send -> C.poll" are per record: median, p99, max and the
records over ``STALL_MS`` (9 ms). Then, for the records over it, the hop of the RF 1 chain
that took longest (how many records each hop stalled); how many consumer fetches were
answered and how many of them parked first (``L.parked``: the fetch came before the data);
per process the CPU time, the run-queue wait (runnable, no CPU: the scheduler's share of
the latency on a loaded machine), the context switches per 1,000 records, and the
consumer's and producer's garbage collections per generation with the longest pause.

``--freeze``: the producer (this process) and the consumer (forked from it, so inheriting
this process's heap: its full collections take 30-130 ms, a consumer of its own far less)
``gc.freeze()`` once ready. ``--wake-audit``: every process notes its ring waits' blocks,
the posts and the frames published to a waiter (module functions ``_audit_wakeups``,
``_wake_report``), and the report gives per waiter the blocks during which a frame was
published to it: woken by a post (and how long after it, the run-queue wait included), or
not posted — a lost wake-up. ``--keep DIR`` copies every process's notes there.
"""
from __future__ import annotations

import argparse
import ast
import bisect
import gc
import json
import multiprocessing
import os
import shutil
import struct
import sys
import tempfile
import time

import numpy as np
import psutil

TRACE_ENV = "RINGLOG_HOP_TRACE"
#: A directory: the brokers write their cProfile stats there (``--profile``).
PROFILE_ENV = "RINGLOG_HOP_PROFILE"
#: "cpu": the profiles count the thread's CPU time (``--profile-cpu``), not wall time.
PROFILE_CLOCK_ENV = "RINGLOG_HOP_PROFILE_CLOCK"
#: Set: every process of the run notes its ring waits, posts and published frames
#: (``--wake-audit``).
WAKE_AUDIT_ENV = "RINGLOG_HOP_WAKE_AUDIT"
#: The audit calls a frame's wake-up lost when no post to its waiter followed within this.
LOST_AFTER_NS = 50_000_000
#: Set: the producer (this process) and the consumer (forked from it) ``gc.freeze()`` what
#: exists once they are ready (``--freeze``).
FREEZE_ENV = "RINGLOG_HOP_FREEZE"
TOPIC = "hops"
STAMP = struct.Struct("<q")
BOUND = 60.0
#: The "> 9 ms" column: a hop's records that took longer than this (the stalls of
#: workload 9, perf/README.md "The consumer's cost per fetch").
STALL_MS = 9

_notes = []  # (event, key, ns) of this process


def _note(event, key, ns=None):
    _notes.append((event, key, time.monotonic_ns() if ns is None else ns))


def _profiler(cProfile):
    """A cProfile.Profile on the wall clock, or on the thread's CPU time with
    ``--profile-cpu`` (a process woken late, or preempted inside a post, then shows no
    time it did not spend)."""
    if os.environ.get(PROFILE_CLOCK_ENV) == "cpu":
        return cProfile.Profile(time.thread_time)
    return cProfile.Profile()


class _Collections:
    """The collector's passes in this process from ``start()`` on: count and pause per
    generation (``gc.callbacks``), for the stalls a full collection makes."""

    def __init__(self):
        self.passes = {0: [], 1: [], 2: []}  # generation -> [pause ns]
        self._began = None
        self._on = False

    def start(self):
        gc.callbacks.append(self._callback)
        self._on = True

    def stop(self):
        self._on = False

    def _callback(self, phase, info):
        if phase == "start":
            self._began = time.perf_counter_ns()
        elif self._on and self._began is not None:
            self.passes[info["generation"]].append(time.perf_counter_ns() - self._began)

    def summary(self):
        """``{generation: (count, max pause ms)}``."""
        return {g: (len(p), max(p, default=0) / 1e6) for g, p in self.passes.items()}


def _dump(label):
    directory = os.environ[TRACE_ENV]
    with open(os.path.join(directory, f"{label}-{os.getpid()}.json"), "w") as out:
        json.dump(_notes, out)
    if _wake_notes:
        with open(os.path.join(directory, f"{label}-{os.getpid()}.wake"), "w") as out:
            json.dump(_wake_notes, out)


# -- the wake-up audit (--wake-audit) -----------------------------------------------------------

_wake_notes = []  # ("park", semaphore, t0, t1, posted, run-queue ns) / ("post"|"pub", semaphore, t)


def _run_queue_ns():
    """This thread's run-queue wait so far (ns; /proc/thread-self/schedstat)."""
    with open("/proc/thread-self/schedstat") as source:
        return int(source.read().split()[1])


class _AuditedSemaphore:
    """A ring wait's semaphore that notes each block (start, end, posted or not, the
    thread's run-queue wait meanwhile) and each post."""

    def __init__(self, semaphore):
        self._semaphore = semaphore
        self.name = semaphore.name

    def acquire(self, timeout=None):
        waited = _run_queue_ns()
        began = time.monotonic_ns()
        posted = False
        try:
            self._semaphore.acquire(timeout)
            posted = True
        finally:
            _wake_notes.append(("park", self.name, began, time.monotonic_ns(), posted,
                                _run_queue_ns() - waited))

    def release(self):
        _wake_notes.append(("post", self.name, time.monotonic_ns()))
        self._semaphore.release()

    def __getattr__(self, name):
        return getattr(self._semaphore, name)


def _audit_wakeups():
    """Note, in this process, every block of a ring wait, every post, and every frame
    published to a peer that waits (the waiter's semaphore): ``_wake_report`` then finds
    the frames published while their reader was parked and how its wake-up went. Wraps
    the shm_ring classes of this process only; the code paths stay the same, plus the
    notes' cost (a few µs per wait and frame)."""
    from shm_ring import wakeup
    from shm_ring.connection import Connection
    proxies = {}
    # id(semaphore) -> (semaphore, its one _AuditedSemaphore): a thread holding its posts
    # keeps one per semaphore (wakeup._held), and the semaphore kept here keeps its id
    init = wakeup.WakeSlot.__init__

    def audited_init(self, words, index, semaphore, pending=None):
        proxy = proxies.get(id(semaphore))
        if proxy is None:
            proxy = proxies[id(semaphore)] = (semaphore, _AuditedSemaphore(semaphore))
        init(self, words, index, proxy[1], pending)
    wakeup.WakeSlot.__init__ = audited_init

    def published(method, slot_of):
        def wrapper(self, *args, **kwargs):
            called = time.monotonic_ns()  # the frame is published after this, then posted
            done = method(self, *args, **kwargs)
            if done is not False:
                _wake_notes.append(("pub", slot_of(self)._semaphore.name, called))
            return done
        return wrapper
    writer = wakeup.RingWriter
    for name in ("write", "try_write", "commit"):
        setattr(writer, name, published(getattr(writer, name), lambda w: w._data_slot))
    for name in ("try_send", "try_send_filled", "commit"):
        setattr(Connection, name, published(getattr(Connection, name), lambda c: c._rsp_data))


# -- the brokers' side --------------------------------------------------------------------------

def _instrument_broker(broker_id):
    """Wrap the broker methods at the hops (module doc)."""
    from replica_proc import fetch_handler, produce_handler, replica_fetcher, request_handler
    from replica_proc.partition import Partition
    from shm_ring.connection import Listener

    me = f"b{broker_id}"
    last_wake = [0]

    wait = Listener.wait

    def listener_wait(self, timeout=None):
        try:
            return wait(self, timeout)
        finally:
            last_wake[0] = time.monotonic_ns()
    Listener.wait = listener_wait

    append_as_leader = Partition.append_as_leader
    appended = []  # base offsets appended by the produce request under way

    def leader_append(self, records, *args, **kwargs):
        base = append_as_leader(self, records, *args, **kwargs)
        if isinstance(base, int):
            _note("L.append", base)
            _note("L.wake", base, last_wake[0])
            _note("L.end", base, self.log.log_end_offset)  # not a time: the batch's end
            appended.append(base)
        return base
    Partition.append_as_leader = leader_append

    handler_call = produce_handler.ProduceHandler.__call__

    def produce(self, channel, header, request):
        started = time.monotonic_ns()
        waiting = len(self._purgatory)
        appended.clear()
        handler_call(self, channel, header, request)
        done = time.monotonic_ns()
        answered = len(self._purgatory) == waiting and request.acks != 0
        for base in appended:
            _note("L.produce", base, started)
            if answered:
                _note("L.respond", base, done)
    produce_handler.ProduceHandler.__call__ = produce

    complete = produce_handler.ProduceHandler._complete

    def delayed_done(self, delayed):
        complete(self, delayed)
        now = time.monotonic_ns()
        for _, results in delayed.topics:
            for result in results:
                if result.error_code == 0:
                    _note("L.respond", result.base_offset, now)
    produce_handler.ProduceHandler._complete = delayed_done

    answer = fetch_handler.FetchHandler._answer

    def fetch_answer(self, channel, header, request, may_park):
        started = time.monotonic_ns()
        offsets = [p.fetch_offset for t in request.topics for p in t.partitions]
        answer(self, channel, header, request, may_park)
        done = time.monotonic_ns()
        follower = request.replica_id
        if follower >= 0 and may_park:
            for offset in offsets:
                _note(f"L.fetch_in.b{follower}", offset, started)
        if channel.parked is None:
            event = f"L.fetch_out.b{follower}" if follower >= 0 else "L.consumer"
            for offset in offsets:
                _note(event, offset, done)
        elif follower < 0:
            for offset in offsets:
                _note("L.parked", offset, done)
    fetch_handler.FetchHandler._answer = fetch_answer

    on_hw = request_handler.RequestHandler.on_high_watermark

    def high_watermark(self, partition, old, size=None):
        _note("L.hw", partition.high_watermark)
        return on_hw(self, partition, old, size)
    request_handler.RequestHandler.on_high_watermark = high_watermark

    answered = replica_fetcher.ReplicaFetcher._answered

    def fetcher_answered(self, api_key, sent, response):
        if response is not None and api_key == 1:
            now = time.monotonic_ns()
            for _, offset in sent.values():
                _note(f"F.recv.{me}", offset, now)
                _note(f"F.wake.{me}", offset, last_wake[0])
        answered(self, api_key, sent, response)
        if response is not None and api_key == 1:
            now = time.monotonic_ns()
            for _, offset in sent.values():
                _note(f"F.append.{me}", offset, now)
    replica_fetcher.ReplicaFetcher._answered = fetcher_answered

    request_sent = replica_fetcher.ReplicaFetcher._sent

    def fetcher_request(self, api_key, sent_now, sent, now):
        request_sent(self, api_key, sent_now, sent, now)
        if api_key == 1 and self._in_flight is sent:
            at = time.monotonic_ns()
            for _, offset in sent.values():
                _note(f"F.next.{me}", offset, at)
    replica_fetcher.ReplicaFetcher._sent = fetcher_request


def _broker(argv):
    from replica_proc import __main__ as broker_main
    broker_id = int(argv[argv.index("--broker-id") + 1])
    _instrument_broker(broker_id)
    if os.environ.get(WAKE_AUDIT_ENV):
        _audit_wakeups()
    profiler = None
    if os.environ.get(PROFILE_ENV):
        import cProfile
        profiler = _profiler(cProfile)
        profiler.enable()
    try:
        return broker_main.main(argv)
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(os.path.join(os.environ[PROFILE_ENV],
                                             f"broker{broker_id}.prof"))
        _dump(f"broker{broker_id}")


# -- the clients' side --------------------------------------------------------------------------

def _consume(data_dir, records, warmup, ready):
    from cluster import KafkaConsumer, TopicPartition
    from shm_ring.connection import ClientConnection
    if os.environ.get(WAKE_AUDIT_ENV):
        _audit_wakeups()
    last_read = [0]
    frames = [0]  # response frames read (Fetch responses, all but a few)
    recv = ClientConnection.recv

    def noted_recv(self, timeout=None, stop=None):
        frame = recv(self, timeout, stop)
        if frame is not None:
            last_read[0] = time.monotonic_ns()
            frames[0] += 1
        return frame
    ClientConnection.recv = noted_recv
    consumer = KafkaConsumer(bootstrap_servers=data_dir, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    # C.polled and C.fetched: the steps of the consumer's own work after C.recv, noted by
    # wrapping this consumer's client poll and fetcher (instance attributes: code unchanged)
    steps = [0, 0]  # the last client poll's return, the last send_fetches' return (ns)
    client_poll, send_fetches = consumer._client.poll, consumer._fetcher.send_fetches

    def noted_poll(*args, **kwargs):
        handled = client_poll(*args, **kwargs)
        steps[0] = time.monotonic_ns()
        return handled

    def noted_send_fetches():
        send_fetches()
        steps[1] = time.monotonic_ns()
    consumer._client.poll = noted_poll
    consumer._fetcher.send_fetches = noted_send_fetches
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        consumer.position(tp)
        if os.environ.get(FREEZE_ENV):
            gc.freeze()  # the driver's heap, inherited by the fork, out of the collector's scans
        ready.set()
        count = 0
        deadline = time.monotonic() + BOUND
        cpu_start = profiler = None
        while count < records and time.monotonic() < deadline:
            if cpu_start is None and count >= warmup:
                collections = _Collections()
                collections.start()
                cpu_start = time.process_time()
                switches_start = psutil.Process().num_ctx_switches()
                waited_start = _run_delay()
                frames_start = frames[0]
                if os.environ.get(PROFILE_ENV):
                    import cProfile
                    profiler = _profiler(cProfile)
                    profiler.enable()
            polled = consumer.poll_batches(timeout_ms=100)
            now = time.monotonic_ns()
            read = last_read[0]
            polled_at, fetched_at = steps
            if not read <= polled_at <= fetched_at:
                polled_at = fetched_at = None  # records that were buffered: no such steps
            for runs in polled.values():
                for run in runs:
                    for value in run.values():
                        key = STAMP.unpack_from(value)[0]
                        _notes.append(("C.recv", key, read))
                        if polled_at is not None:
                            _notes.append(("C.polled", key, polled_at))
                            _notes.append(("C.fetched", key, fetched_at))
                        _notes.append(("C.poll", key, now))
                        count += 1
        if cpu_start is not None:
            used = time.process_time() - cpu_start
            switched = tuple(a - b for a, b in zip(psutil.Process().num_ctx_switches(),
                                                   switches_start))
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(os.path.join(os.environ[PROFILE_ENV], "consumer.prof"))
            with open(os.path.join(os.environ[TRACE_ENV], "consumer.cpu"), "w") as out:
                out.write(repr((used, frames[0] - frames_start, switched,
                                collections.summary(), _run_delay() - waited_start)))
    finally:
        consumer.close()
        _dump("consumer")


def _instrument_producer():
    """Note ``P.written`` for every batch of a Produce request once the sender wrote it:
    the producer's requests go through ``KafkaClient.send_produce`` (``ProduceFrame``, no
    kio request object), so that is the call wrapped — only in this process, the client
    itself untouched."""
    from cluster.client.kafka_client import KafkaClient
    send_produce = KafkaClient.send_produce
    offset = [0]

    def traced(self, node_id, frame, topics, expect_response=True):
        future = send_produce(self, node_id, frame, topics, expect_response)
        now = time.monotonic_ns()
        for _, partitions in topics:
            for _, records in partitions:
                head = records.parts[0] if hasattr(records, "parts") else records
                _note("P.written", offset[0], now)
                offset[0] += int.from_bytes(bytes(head[57:61]), "big")  # recordCount
        return future
    KafkaClient.send_produce = traced


def run(rf, rate, records, warmup):
    """One run (module doc); ``rate`` None: flat out with workload 8's producer settings."""
    from cluster import Cluster, KafkaAdminClient, KafkaProducer, NewTopic
    from perf.suite.latency import Pacer
    trace_dir = tempfile.mkdtemp(prefix="hop-trace-")
    os.environ[TRACE_ENV] = trace_dir
    data_dir = tempfile.mkdtemp(prefix="hop-cluster-")
    brokers = 1 if rf == 1 else 3
    cluster = Cluster(data_dir, brokers=brokers, auto_create_topics_enable=False,
                      broker_command=(sys.executable, "-m", "perf.hop_trace", "--broker"))
    consumer = None
    try:
        cluster.start()
        with KafkaAdminClient(bootstrap_servers=data_dir) as admin:
            configs = {"min.insync.replicas": str(rf - 1)} if rf > 1 else {}
            admin.create_topics([NewTopic(TOPIC, 1, rf, topic_configs=configs)])
        cluster.wait_for_metadata(
            lambda i: TOPIC in i.topics and i.topics[TOPIC].partitions[0].leader >= 0
            and len(i.topics[TOPIC].partitions[0].isr) == rf)
        context = multiprocessing.get_context("fork")
        ready = context.Event()
        total = warmup + records
        consumer = context.Process(target=_consume, args=(data_dir, total, warmup, ready))
        consumer.start()
        if not ready.wait(BOUND):
            raise TimeoutError("the consumer did not start")
        _instrument_producer()
        if os.environ.get(WAKE_AUDIT_ENV):
            _audit_wakeups()  # after the fork: the consumer installs its own
        cluster_ids = list(cluster.pids())
        processes = [psutil.Process(pid) for pid in cluster.pids().values()]
        processes += [psutil.Process(consumer.pid), psutil.Process()]
        value = bytearray(100)
        settings = dict(linger_ms=0) if rate else dict(linger_ms=5, batch_size=16384)
        with KafkaProducer(bootstrap_servers=data_dir, acks="all" if rf > 1 else 1,
                           enable_idempotence=False, **settings) as producer:
            producer.partitions_for(TOPIC)
            for i in range(warmup):
                STAMP.pack_into(value, 0, i)
                producer.send(TOPIC, bytes(value)).get(BOUND)
            time.sleep(0.1)
            if os.environ.get(FREEZE_ENV):
                gc.freeze()
            collections = _Collections()
            collections.start()
            cpu_before = [p.cpu_times() for p in processes]
            switches_before = [_switches(p) for p in processes]
            waits_before = [_run_delay(p.pid) for p in processes]
            pacer = Pacer(rate) if rate else None
            for n in range(records):
                i = warmup + n
                if pacer is not None:
                    pacer.wait(n)
                STAMP.pack_into(value, 0, i)
                _note("P.send", i)
                producer.send(TOPIC, bytes(value)).add_callback(
                    lambda _, i=i: _note("P.ack", i))
            producer.flush(BOUND)
            collections.stop()
        _dump("producer")
        consumer.join(BOUND)
        cpu = [_cpu(p) - _cpu_of(start) for p, start in zip(processes, cpu_before)]
        switches = [tuple(a - b for a, b in zip(_switches(p), start))
                    for p, start in zip(processes, switches_before)]
        waits = [_run_delay(p.pid) - start for p, start in zip(processes, waits_before)]
        try:
            with open(os.path.join(trace_dir, "consumer.cpu")) as source:
                cpu[-2], fetches, switches[-2], consumer_gc, waits[-2] = ast.literal_eval(
                    source.read())
            with open(os.path.join(trace_dir, "gc"), "w") as out:
                out.write(repr({"consumer": consumer_gc, "producer": collections.summary()}))
            with open(os.path.join(trace_dir, "fetches"), "w") as out:
                out.write(repr(fetches))
        except FileNotFoundError:
            pass
    finally:
        cluster.stop()
        if consumer is not None and consumer.is_alive():
            consumer.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
    names = [f"broker {b}" for b in cluster_ids] + ["consumer", "producer"]
    return (trace_dir, dict(zip(names, cpu)), dict(zip(names, switches)),
            dict(zip(names, waits)))


def _cpu_of(times):
    return times.user + times.system


def _run_delay(pid="self"):
    """Seconds the threads of process ``pid`` spent runnable but waiting for a CPU so far
    (the scheduler's run-queue wait, /proc/<pid>/task/*/schedstat; threads that ended are
    not counted; nan if the process ended)."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat") as source:
                    total += int(source.read().split()[1])
            except (FileNotFoundError, ProcessLookupError):
                pass
    except (FileNotFoundError, ProcessLookupError):
        return float("nan")
    return total / 1e9


def _switches(process):
    """(voluntary, involuntary) context switches of ``process`` so far ((nan, nan) if it
    ended)."""
    try:
        return tuple(process.num_ctx_switches())
    except psutil.Error:
        return float("nan"), float("nan")


def _cpu(process):
    """CPU seconds of ``process`` so far (0 if it ended: the consumer, once done)."""
    try:
        return _cpu_of(process.cpu_times())
    except psutil.Error:
        return float("nan")


def report(trace_dir, warmup, records):
    events = {}
    for name in os.listdir(trace_dir):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(trace_dir, name)) as source:
            for event, key, ns in json.load(source):
                if key >= warmup or event == "L.end":
                    events.setdefault(event, {})[key] = ns
    followers = sorted({e.split(".")[-1] for e in events if e.startswith("F.recv.")})
    print(f"consumer fetches answered {len(events.get('L.consumer', {}))}, of them parked "
          f"first {len(events.get('L.parked', {}))}")
    sends, polls = events.get("P.send", {}), events.get("C.poll", {})
    if sends and polls:
        seconds = (max(polls.values()) - min(sends.values())) / 1e9
        print(f"end to end {records / seconds:,.0f} records/s; produce requests "
              f"{len(events.get('P.written', {}))}, follower fetches answered "
              + ", ".join(f"{f} {len(events.get(f'L.fetch_out.{f}', {}))}"
                          for f in followers))
    chain = [("P.send", 0), ("P.written", 0), ("L.wake", 0), ("L.produce", 0),
             ("L.append", 0)]
    rows = _hops(events, chain)
    for follower in followers:
        rows += _hops(events, [("L.append", 0), (f"L.fetch_out.{follower}", 0),
                               (f"F.wake.{follower}", 0), (f"F.recv.{follower}", 0),
                               (f"F.append.{follower}", 0), (f"F.next.{follower}", 1),
                               (f"L.fetch_in.{follower}", 1), ("L.hw", 1)])
    rows += _hops(events, [("L.append", 0), ("L.hw", 1), ("L.respond", 0), ("P.ack", 0)])
    rows += _hops(events, [("L.hw", 1), ("L.consumer", 0), ("C.recv", 0), ("C.poll", 0)])
    rows += _hops(events, [("C.recv", 0), ("C.polled", 0), ("C.fetched", 0), ("C.poll", 0)])
    rows += _hops(events, [("P.send", 0), ("P.ack", 0)])
    rows += _hops(events, [("P.send", 0), ("C.poll", 0)])
    print(f"{'hop':<44} {'records':>8} {'median µs':>10} {'p99 µs':>10} {'max µs':>10} "
          f"{'> ' + str(STALL_MS) + ' ms':>8}")
    for name, values in rows:
        if len(values):
            print(f"{name:<44} {len(values):>8} {np.median(values) / 1e3:>10.1f} "
                  f"{np.percentile(values, 99) / 1e3:>10.1f} {values.max() / 1e3:>10.1f} "
                  f"{np.count_nonzero(values > STALL_MS * 1e6):>8}")
        else:
            print(f"{name:<44} {0:>8}")
    _stalls(events)


def _stalls(events):
    """Where the records whose ``P.send -> C.poll`` took more than ``STALL_MS`` lost it:
    each such record's path through the RF 1 chain (its batch's leader hops, the consumer's
    answer that carried it, its own consumer hops), and per hop the records of those for
    which that hop was the longest."""
    sends, polls = events.get("P.send", {}), events.get("C.poll", {})
    bases = np.array(sorted(events.get("L.append", {})), dtype=np.int64)
    fetched = np.array(sorted(events.get("L.consumer", {})), dtype=np.int64)
    if not len(bases) or not len(fetched):
        return
    chain = [("P.send", "record"), ("P.written", "batch"), ("L.wake", "batch"),
             ("L.produce", "batch"), ("L.append", "batch"), ("L.consumer", "fetch"),
             ("C.recv", "record"), ("C.polled", "record"), ("C.fetched", "record"),
             ("C.poll", "record")]
    longest = {}
    stalled = 0
    for i, sent in sends.items():
        if i not in polls or polls[i] - sent <= STALL_MS * 1e6:
            continue
        stalled += 1
        keys = {"record": i, "batch": bases[max(0, np.searchsorted(bases, i, "right") - 1)],
                "fetch": fetched[max(0, np.searchsorted(fetched, i, "right") - 1)]}
        times = [(event, events.get(event, {}).get(int(keys[kind]))) for event, kind in chain]
        times = [(event, ns) for event, ns in times if ns is not None]
        hops = [(f"{a} -> {b}", nb - na) for (a, na), (b, nb) in zip(times, times[1:])]
        if hops:
            name, _ = max(hops, key=lambda hop: hop[1])
            longest[name] = longest.get(name, 0) + 1
    if stalled:
        print(f"records over {STALL_MS} ms send -> poll: {stalled}; the hop that took longest: "
              + ", ".join(f"{name} {count}" for name, count in
                          sorted(longest.items(), key=lambda item: -item[1])))


def _wake_report(trace_dir, margin_ns=200_000):
    """The wake-up audit (``--wake-audit``): per waiter (a broker's doorbell, a client's
    response ring), its blocks during which a frame was published to it (its publisher's
    call began after the block did and more than ``margin_ns`` before it ended; the post,
    if the waiter's flag asks for one, comes after the frame): woken by a post made
    during the block — how long from that post to the waiter running, and how much of it
    the waiter's thread spent on the run queue — or not posted at all, the block running
    out: a lost wake-up."""
    parks, posts, pubs = {}, {}, {}
    for name in os.listdir(trace_dir):
        if not name.endswith(".wake"):
            continue
        with open(os.path.join(trace_dir, name)) as source:
            for note in json.load(source):
                kind, semaphore = note[0], note[1]
                if kind == "park":
                    parks.setdefault(semaphore, []).append(note[2:])
                else:
                    (posts if kind == "post" else pubs).setdefault(semaphore, []).append(note[2])
    for times in list(posts.values()) + list(pubs.values()):
        times.sort()

    def first(times, start, end):
        at = bisect.bisect_right(times, start)
        return times[at] if at < len(times) and times[at] < end else None
    print("wake-up audit (blocks during which a frame was published to the waiter):")
    for semaphore in sorted(parks):
        woken, late, queued, after, lost = 0, [], [], [], []
        for began, ended, posted, run_queue in parks[semaphore]:
            published = first(pubs.get(semaphore, []), began, ended - margin_ns)
            if published is None:
                continue
            post = first(posts.get(semaphore, []), published, ended)
            if posted and post is not None:
                woken += 1
                late.append(max(0, ended - post))
                queued.append(run_queue)
            elif not posted:
                # no post while parked: one made later (a post its publisher held until the
                # end of its turn), or none at all within LOST_AFTER_NS: lost
                post = first(posts.get(semaphore, []), published, published + LOST_AFTER_NS)
                if post is None:
                    lost.append(ended - began)
                else:
                    after.append(post - published)
        if not woken and not lost and not after:
            continue
        waiter = semaphore.rsplit(".", 2)[-2:] if "doorbell" in semaphore else \
            semaphore.rsplit(".", 3)[-3:-2]
        line = f"  {'.'.join(waiter):<28} woken by a post {woken}"
        if late:
            line += (f" (post -> running median {np.median(late) / 1e3:.0f} µs, max "
                     f"{max(late) / 1e6:.1f} ms; run queue median "
                     f"{np.median(queued) / 1e3:.0f} µs, max {max(queued) / 1e6:.1f} ms)")
        if after:
            line += (f"; block ran out before a later post {len(after)} (publication -> post "
                     f"max {max(after) / 1e6:.1f} ms)")
        line += f"; LOST {len(lost)}"
        if lost:
            line += f" (longest block {max(lost) / 1e6:.1f} ms)"
        print(line)


def _hops(events, chain):
    """(name, ns per record) of each consecutive pair of ``chain``: (event, 0 if keyed by
    the batch's base offset, 1 if by its end offset)."""
    ends = events.get("L.end", {})
    rows = []
    for (a, da), (b, db) in zip(chain, chain[1:]):
        first, second = events.get(a, {}), events.get(b, {})
        if da:
            first = {base: first[end] for base, end in ends.items() if end in first}
        if db:
            second = {base: second[end] for base, end in ends.items() if end in second}
        values = np.array([second[k] - ns for k, ns in first.items() if k in second],
                          dtype=np.int64)
        rows.append((f"{a} -> {b}", values))
    return rows


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--broker"]:
        return _broker(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rf", type=int, choices=(1, 3), default=1)
    parser.add_argument("--rate", type=float, default=1000.0,
                        help="records/s (0: flat out, linger_ms 5 and batch_size 16384 as "
                             "workload 8, the producer's records/s and requests printed)")
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--wake-audit", action="store_true",
                        help="note every ring wait's blocks, posts and published frames in "
                             "every process and print, per waiter, the frames published "
                             "while it was parked: woken by a post (and how late, the "
                             "run-queue wait included) or lost (its block ran out)")
    parser.add_argument("--keep", metavar="DIR",
                        help="copy every process's notes (JSON: hops, and with --wake-audit "
                             "the waits, posts and publications) to DIR")
    parser.add_argument("--freeze", action="store_true",
                        help="gc.freeze() in the producer and the consumer once they are "
                             "ready: the consumer is forked from this process and inherits "
                             "its heap, so a full collection there takes 30-130 ms (printed: "
                             "'collections'), which a consumer of its own would not")
    parser.add_argument("--profile", metavar="DIR",
                        help="the brokers write cProfile stats to DIR/broker<id>.prof, the "
                             "consumer (after the warm-up) to DIR/consumer.prof")
    parser.add_argument("--profile-cpu", action="store_true",
                        help="with --profile: time the profiles by the thread's CPU time "
                             "instead of the wall clock")
    args = parser.parse_args(argv)
    if args.freeze:
        os.environ[FREEZE_ENV] = "1"
    if args.wake_audit:
        os.environ[WAKE_AUDIT_ENV] = "1"
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        os.environ[PROFILE_ENV] = os.path.abspath(args.profile)
        if args.profile_cpu:
            os.environ[PROFILE_CLOCK_ENV] = "cpu"
    trace_dir, cpu, switches, waits = run(args.rf, args.rate, args.records, args.warmup)
    try:
        print(f"RF {args.rf}, {args.rate:.0f} records/s, {args.records} records, load "
              f"{os.getloadavg()[0]:.2f}")
        report(trace_dir, args.warmup, args.records)
        if args.wake_audit:
            _wake_report(trace_dir)
        print("CPU per record (user + system, µs): " + ", ".join(
            f"{name} {seconds / args.records * 1e6:.1f}" for name, seconds in cpu.items()))
        print("run-queue wait per record (runnable, no CPU; µs): " + ", ".join(
            f"{name} {seconds / args.records * 1e6:.1f}" for name, seconds in waits.items()))
        print("context switches per 1,000 records (voluntary / involuntary): " + ", ".join(
            f"{name} {v / args.records * 1e3:.0f} / {i / args.records * 1e3:.0f}"
            for name, (v, i) in switches.items()))
        try:
            with open(os.path.join(trace_dir, "gc")) as source:
                for name, passes in ast.literal_eval(source.read()).items():
                    print(f"{name} collections (generation: count, longest ms): " + ", ".join(
                        f"{g}: {n}, {pause:.1f}" for g, (n, pause) in passes.items()))
        except FileNotFoundError:
            pass
        try:
            with open(os.path.join(trace_dir, "fetches")) as source:
                fetches = int(source.read())
            print(f"consumer: {fetches} responses read, CPU per response "
                  f"{cpu['consumer'] / max(fetches, 1) * 1e6:.1f} µs")
        except FileNotFoundError:
            pass
    finally:
        if args.keep:
            shutil.copytree(trace_dir, args.keep, dirs_exist_ok=True)
        shutil.rmtree(trace_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
