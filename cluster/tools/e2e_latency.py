"""``ringlog e2e-latency``: the time from ``send()`` in one process to the record's arrival
in a consumer in another process, as Kafka's EndToEndLatency tool reports it.

::

    ringlog e2e-latency --bootstrap-server D --topic T --num-records N --record-size B
        --acks 1|all [--throughput R [--linger-ms L]] [--producer-props k=v ...]
        [--consumer-props k=v ...] [--timeout-ms MS]

A receiver process (``multiprocessing``, spawned) assigns itself every partition of T at
their end and says it is ready; then this process sends N records of B bytes. Each value
starts with a run id, the record's number and its send time — CLOCK_MONOTONIC, which every
process on the host shares — stamped just before ``send()``::

    0        8        16       24                       B
    +--------+--------+--------+------------------------+
    | run id |  seq   | sent ns| padding (upper-case)   |    all little-endian int64
    +--------+--------+--------+------------------------+

The receiver takes the clock as each poll returns and keeps ``received - sent`` per record
number (records of other runs on the topic are skipped), then hands the latencies back over
a pipe. Without ``--throughput`` records go one at a time, each sent once the previous one
arrived (Kafka's tool: send, wait, poll); with it they go open loop at R records/s
(``--linger-ms`` 0 by default, as Kafka's tool sets it). Prints::

    Avg latency: 0.1523 ms
    Percentiles: 50th = 0.131, 99th = 0.412, 99.9th = 1.203

Kafka's lines, in ms — with three decimals, where Kafka prints whole milliseconds (which
would read 0 here). Lost or duplicated records are reported and make the exit code 1.
As in Kafka, only acks 1 and all are accepted, and a missing topic is created with one
partition and replication factor 1.
"""
from __future__ import annotations

import multiprocessing
import os
import struct
import sys
import time

import numpy as np

from cluster.admin.kafka_admin_client import KafkaAdminClient, NewTopic
from cluster.errors import KafkaError
from cluster.producer.kafka_producer import KafkaProducer
from cluster.structs import TopicPartition
from cluster.tools.progress import Progress
from cluster.tools.support import (
    FAILED,
    ToolError,
    add_bootstrap_argument,
    client_properties,
    describe,
    fail,
    setup_logging,
    stop_on_sigterm,
)
from cluster.tools.throttle import Throttle
from consumer_proc.consumer import KafkaConsumer

#: The value's header: run id, record number, send time (CLOCK_MONOTONIC ns).
HEADER = struct.Struct("<qqq")
#: Kafka's POLL_TIMEOUT_MS: longest wait for a record.
TIMEOUT_MS = 60_000
#: Seconds the receiver may take to start and reach the end of the partitions.
READY_TIMEOUT = 60.0
#: Smallest gap the open-loop sender sleeps for (shorter ones are sent at once).
MIN_SLEEP = 20e-6
#: Seconds the receiver gets to exit by itself, then after SIGTERM.
EXIT_GRACE = 10.0
PERCENTILES = (0.5, 0.99, 0.999)

_CTX = multiprocessing.get_context("spawn")


def _now():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def add_arguments(parser):
    add_bootstrap_argument(parser)
    parser.add_argument("--topic", required=True, help="topic to send through (created with "
                                                       "one partition if missing)")
    parser.add_argument("--num-records", type=int, required=True, help="records to send")
    parser.add_argument("--record-size", type=int, required=True,
                        help=f"bytes per value (at least {HEADER.size})")
    parser.add_argument("--acks", required=True, help="1 or all")
    parser.add_argument("--throughput", type=float,
                        help="send open loop at this many records/s (default: one at a "
                             "time, each after the previous one arrived)")
    parser.add_argument("--linger-ms", type=int, default=0, help="producer linger.ms (0)")
    parser.add_argument("--producer-props", nargs="+", default=[], metavar="KEY=VALUE",
                        help="more producer properties")
    parser.add_argument("--consumer-props", nargs="+", default=[], metavar="KEY=VALUE",
                        help="more consumer properties")
    parser.add_argument("--timeout-ms", type=int, default=TIMEOUT_MS,
                        help=f"longest wait for a record (default {TIMEOUT_MS})")


def run(args):
    setup_logging()
    try:
        _check(args)
        producer_props = client_properties(
            args.bootstrap_server, pairs=args.producer_props,
            defaults={"client.id": "e2e-latency-producer"})
        producer_props.update({"acks": args.acks, "linger.ms": str(args.linger_ms)})
        consumer_props = client_properties(
            args.bootstrap_server, pairs=args.consumer_props,
            defaults={"client.id": "e2e-latency-consumer"})
    except ToolError as exc:
        return fail(exc)
    receiver = None
    try:
        with stop_on_sigterm():
            partitions = _ensure_topic(producer_props, args.topic)
            run_id = int.from_bytes(os.urandom(8), "little") >> 1
            receiver = Receiver(consumer_props, args.topic, partitions, run_id,
                                args.num_records, args.timeout_ms, closed_loop=args.throughput
                                is None)
            receiver.wait_ready()
            sent, elapsed, errors = _send(producer_props, args, run_id, receiver)
            latencies, duplicates = receiver.results(args.timeout_ms / 1000 + READY_TIMEOUT)
            receiver.close()  # it exits by itself once it sent the results
    except (ToolError, KafkaError) as exc:
        return fail(exc)
    finally:
        if receiver is not None:
            receiver.close(grace=0)  # a failure or Ctrl-C: stop it now (no-op when done)
    return _report(sent, elapsed, errors, latencies, duplicates)


def _check(args):
    if args.acks not in ("1", "all", "-1"):
        raise ToolError(f"Latency testing requires synchronous acknowledgement. Please use 1 "
                        f"or all, found --acks {args.acks}")
    if args.num_records <= 0:
        raise ToolError(f"--num-records should be greater than zero, found {args.num_records}")
    if args.record_size < HEADER.size:
        raise ToolError(f"--record-size must be at least {HEADER.size} (run id, record "
                        f"number and send time), found {args.record_size}")
    if args.throughput is not None and args.throughput <= 0:
        raise ToolError(f"--throughput must be positive, found {args.throughput}")


def _ensure_topic(props, topic):
    """The partition ids of ``topic``, creating it (1 partition, RF 1) if missing."""
    with KafkaAdminClient(bootstrap_servers=props["bootstrap.servers"]) as admin:
        if topic not in admin.list_topics():
            print(f'Topic "{topic}" does not exist. Will create topic with 1 partition(s) and '
                  f'replication factor = 1')
            admin.create_topics([NewTopic(topic, 1, 1)])
        [described] = admin.describe_topics([topic])
    return [p["partition_index"] for p in described["partitions"]]


def _send(props, args, run_id, receiver):
    """Send every record; returns (records sent, seconds taken, send errors)."""
    value = bytearray(b"A" * args.record_size)
    errors = []
    closed_loop = args.throughput is None
    wait = args.timeout_ms / 1000
    with KafkaProducer(**props) as producer, \
            Progress(args.num_records, "records sent") as progress:
        producer.partitions_for(args.topic)
        send, pack, topic = producer.send, HEADER.pack_into, args.topic
        throttle = Throttle(-1 if closed_loop else args.throughput, min_sleep=MIN_SLEEP)
        start = _now()
        for seq in range(args.num_records):
            pack(value, 0, run_id, seq, _now())
            send(topic, bytes(value)).add_errback(errors.append)
            if closed_loop:
                receiver.wait_arrival(seq, wait)
            else:
                throttle.pace(seq + 1)
            progress.update(seq + 1)
        producer.flush()
        elapsed = (_now() - start) / 1e9
    return args.num_records, elapsed, errors


def _report(sent, elapsed, errors, latencies, duplicates):
    arrived = latencies[latencies >= 0]
    lost = sent - len(arrived)
    print(f"{sent} records sent in {elapsed:.3f} s ({sent / elapsed:.1f} records/sec); "
          f"{len(arrived)} received in another process, {lost} lost, {duplicates} duplicated")
    if len(arrived):
        ordered = np.sort(arrived) / 1e6
        p50, p99, p999 = (ordered[int(len(ordered) * p)] for p in PERCENTILES)
        print(f"Avg latency: {ordered.mean():.4f} ms")
        print(f"Percentiles: 50th = {p50:.3f}, 99th = {p99:.3f}, 99.9th = {p999:.3f}")
    sys.stdout.flush()
    if errors:
        print(f"{len(errors)} sends failed; the first: {describe(errors[0])}", file=sys.stderr)
    if lost or duplicates:
        print(f"{lost} records never arrived and {duplicates} arrived more than once",
              file=sys.stderr)
    return FAILED if errors or lost or duplicates else 0


# -- the receiver process ----------------------------------------------------------------------

class Receiver:
    """The consumer process, seen from the sender: started at construction; ``close()``
    waits for it to end, stopping it if it does not, and is safe to call twice. The tool's
    thread owns it."""

    def __init__(self, props, topic, partitions, run_id, count, timeout_ms, closed_loop):
        self._pipe, child_pipe = _CTX.Pipe()
        self._arrived = _CTX.Semaphore(0) if closed_loop else None
        self.process = _CTX.Process(
            target=_receive, name="e2e-latency-receiver", daemon=True,
            args=(child_pipe, self._arrived, props, topic, partitions, run_id, count,
                  timeout_ms))
        self.process.start()
        child_pipe.close()

    def _message(self, timeout, what):
        if not self._pipe.poll(timeout):
            raise ToolError(f"the receiver process (pid {self.process.pid}) sent no {what} "
                            f"within {timeout:.0f} s")
        try:
            message = self._pipe.recv()
        except EOFError:
            self.process.join(1.0)
            raise ToolError(f"the receiver process (pid {self.process.pid}) exited with "
                            f"code {self.process.exitcode} before its {what}") from None
        if isinstance(message, str):
            raise ToolError(f"the receiver process failed: {message}")
        return message

    def wait_ready(self):
        self._message(READY_TIMEOUT, "ready signal")

    def wait_arrival(self, seq, timeout):
        """Closed loop: block until the receiver got record ``seq``."""
        if not self._arrived.acquire(timeout=timeout):
            raise ToolError(f"record {seq} did not arrive within {timeout:.0f} s")

    def results(self, timeout):
        """(latencies in ns by record number, -1 where none arrived; duplicates)."""
        duplicates = self._message(timeout, "results")
        latencies = np.frombuffer(self._pipe.recv_bytes(), dtype=np.int64)
        return latencies, duplicates

    def close(self, grace=EXIT_GRACE):
        """Let the process finish (it closes its consumer after sending the results), then
        stop it if it is still running: SIGTERM, then SIGKILL."""
        process = self.process
        process.join(grace)
        if process.is_alive():
            process.terminate()
            process.join(grace)
            if process.is_alive():
                process.kill()
        process.join()
        self._pipe.close()


def _receive(pipe, arrived, props, topic, partitions, run_id, count, timeout_ms):
    """The receiver process's main: consume until ``count`` records of ``run_id`` arrived
    or ``timeout_ms`` passed without one; send (duplicates, latencies) back."""
    setup_logging()
    latencies = np.full(count, -1, dtype=np.int64)
    duplicates = received = 0
    consumer = None
    try:
        with stop_on_sigterm():
            consumer = KafkaConsumer(**props)
            assigned = [TopicPartition(topic, p) for p in partitions]
            consumer.assign(assigned)
            consumer.seek_to_end()
            for tp in assigned:
                consumer.position(tp)
            pipe.send(True)
            unpack = HEADER.unpack_from
            idle_since = time.monotonic()
            while received < count:
                polled = consumer.poll_batches(timeout_ms=100)
                now = _now()
                if not polled:
                    if time.monotonic() - idle_since > timeout_ms / 1000:
                        break
                    continue
                idle_since = time.monotonic()
                for runs in polled.values():
                    for columns in runs:
                        for value in columns.values():
                            if value is None or len(value) < HEADER.size:
                                continue
                            run, seq, sent = unpack(value)
                            if run != run_id or not 0 <= seq < count:
                                continue
                            if latencies[seq] >= 0:
                                duplicates += 1
                                continue
                            latencies[seq] = now - sent
                            received += 1
                            if arrived is not None:
                                arrived.release()
        pipe.send(duplicates)
        pipe.send_bytes(latencies.tobytes())
    except KafkaError as exc:
        pipe.send(str(exc))
    finally:
        if consumer is not None:
            consumer.close()
        pipe.close()
