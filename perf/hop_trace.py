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
batch; "P.send -> P.ack" and "P.send -> C.poll" are per record.
"""
from __future__ import annotations

import argparse
import ast
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
TOPIC = "hops"
STAMP = struct.Struct("<q")
BOUND = 60.0

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


def _dump(label):
    directory = os.environ[TRACE_ENV]
    with open(os.path.join(directory, f"{label}-{os.getpid()}.json"), "w") as out:
        json.dump(_notes, out)


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
        ready.set()
        count = 0
        deadline = time.monotonic() + BOUND
        cpu_start = profiler = None
        while count < records and time.monotonic() < deadline:
            if cpu_start is None and count >= warmup:
                cpu_start = time.process_time()
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
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(os.path.join(os.environ[PROFILE_ENV], "consumer.prof"))
            with open(os.path.join(os.environ[TRACE_ENV], "consumer.cpu"), "w") as out:
                out.write(repr((used, frames[0] - frames_start)))
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
            cpu_before = [p.cpu_times() for p in processes]
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
        _dump("producer")
        consumer.join(BOUND)
        cpu = [_cpu(p) - _cpu_of(start) for p, start in zip(processes, cpu_before)]
        try:
            with open(os.path.join(trace_dir, "consumer.cpu")) as source:
                cpu[-2], fetches = ast.literal_eval(source.read())
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
    return trace_dir, dict(zip(names, cpu))


def _cpu_of(times):
    return times.user + times.system


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
    print(f"{'hop':<44} {'records':>8} {'median µs':>10} {'p99 µs':>10}")
    for name, values in rows:
        if len(values):
            print(f"{name:<44} {len(values):>8} {np.median(values) / 1e3:>10.1f} "
                  f"{np.percentile(values, 99) / 1e3:>10.1f}")
        else:
            print(f"{name:<44} {0:>8}")


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
    parser.add_argument("--profile", metavar="DIR",
                        help="the brokers write cProfile stats to DIR/broker<id>.prof, the "
                             "consumer (after the warm-up) to DIR/consumer.prof")
    parser.add_argument("--profile-cpu", action="store_true",
                        help="with --profile: time the profiles by the thread's CPU time "
                             "instead of the wall clock")
    args = parser.parse_args(argv)
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        os.environ[PROFILE_ENV] = os.path.abspath(args.profile)
        if args.profile_cpu:
            os.environ[PROFILE_CLOCK_ENV] = "cpu"
    trace_dir, cpu = run(args.rf, args.rate, args.records, args.warmup)
    try:
        print(f"RF {args.rf}, {args.rate:.0f} records/s, {args.records} records, load "
              f"{os.getloadavg()[0]:.2f}")
        report(trace_dir, args.warmup, args.records)
        print("CPU per record (user + system, µs): " + ", ".join(
            f"{name} {seconds / args.records * 1e6:.1f}" for name, seconds in cpu.items()))
        try:
            with open(os.path.join(trace_dir, "fetches")) as source:
                fetches = int(source.read())
            print(f"consumer: {fetches} responses read, CPU per response "
                  f"{cpu['consumer'] / max(fetches, 1) * 1e6:.1f} µs")
        except FileNotFoundError:
            pass
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
