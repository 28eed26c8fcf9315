"""The workload of ``ringlog chaos``: producer and consumer processes, each writing its own
history file.

Every client is a separate OS process (``multiprocessing`` spawn context) that runs until
its stop event is set, and writes one JSON object per line to its history file, line
buffered, so a line is in the kernel's hands as soon as the operation it records is over
and a killed client loses nothing it had recorded.

Producer ``n`` sends the values ``p<n>:<seq>`` (``seq`` from 0, six digits or more),
keyed ``k0``..``k<KEYS-1>`` (``Sends`` chooses which) unless unkeyed, with acks=all,
retries and one request in flight per broker (``max_in_flight_requests_per_connection=1``:
what makes "one producer's sequence numbers rise with the offsets" a rule to check) — or,
idempotent (``ClientSpec.idempotent``), with ``enable_idempotence`` and up to
``IDEMPOTENT_IN_FLIGHT`` requests in flight, whose order the idempotent producer keeps —
at most ``WINDOW`` sends outstanding, so a partition that is down holds up only the sends to
it. Its lines, Jepsen's operation types (the outcome written when it arrives, by the
producer's sender thread)::

    {"op": "invoke", "p": n, "seq": s, "t": T}
    {"op": "ok",     "p": n, "seq": s, "t": T, "partition": P, "offset": O}
    {"op": "fail",   "p": n, "seq": s, "t": T, "partition": P or null, "error": "..."}
    {"op": "info",   "p": n, "seq": s, "t": T, "partition": P or null}   # unknown at timeout

A failed send may still have been written (a timeout after the broker appended); only
``ok`` means the record must be there. Consumer ``n`` reads every partition from the
start (read_uncommitted, or read_committed as its spec says; no group) and writes
``{"op": "read", "c": n, "partition": P, "offset": O, "value": "...", "t": T}`` per
record, and ``{"op": "error", ...}`` when its client failed and was made again (from the
next offset of each partition). ``t`` is epoch seconds (``time.time()``), comparable
across processes. A client's log lines (retries, reconnects) go to ``<history
file>.log``.

A client is started with ``start_client`` and told to stop with a ``StopEvent``: the
terminal's Ctrl-C reaches the command alone, which stops its clients in order (as the
supervisor its brokers), and no client, killed or interrupted at any moment, can leave
the command's stop waiting.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import multiprocessing
import multiprocessing.resource_tracker
import os
import signal
import threading
import time

from cluster import KafkaConsumer, KafkaProducer, TopicPartition
from cluster.errors import KafkaError, KafkaTimeoutError
from cluster.stats.publisher import set_process_role

#: Keys a keyed producer cycles through.
KEYS = 16
#: Producer timeouts (ms): short, so a send to an offline partition ends within a run.
REQUEST_TIMEOUT_MS = 2000
DELIVERY_TIMEOUT_MS = 6000
MAX_BLOCK_MS = 2000
#: Seconds past the delivery timeout after which a send's outcome is unknown ("info").
OUTCOME_SLACK = 2.0
OUTCOME_TIMEOUT = DELIVERY_TIMEOUT_MS / 1000 + OUTCOME_SLACK
#: Requests in flight per broker of an idempotent producer (Kafka's most for idempotence).
IDEMPOTENT_IN_FLIGHT = 5
#: Sends a producer has outstanding at most, and per partition (``Sends``).
WINDOW = 64
PER_PARTITION = 8
#: Seconds a producer with no room waits for its oldest send before looking again.
BLOCKED_WAIT = 0.01
#: Seconds a consumer waits before making its client again after an error.
RETRY_PAUSE = 0.2
#: A group member's session.timeout.ms: the least the brokers allow
#: (group.min.session.timeout.ms), so that a killed member leaves the group soon (Kafka's
#: default, 45 s, would hold every rebalance of a short run).
MEMBER_SESSION_TIMEOUT_MS = 6000
#: What separates a padded value from its padding (``padded``).
PAD = b"#"
#: Bytes of padded records a producer has outstanding at most (``Sends``).
WINDOW_BYTES = 32 * 1024 * 1024
#: Bytes a request may carry besides its records' values (``--record-bytes``).
REQUEST_OVERHEAD = 64 * 1024
#: How client processes are made (a fresh interpreter each).
CTX = multiprocessing.get_context("spawn")


class StopEvent:
    """A client process's stop: ``set()`` by the command; ``is_set()`` and ``wait(timeout)``
    by the client (and the command), as multiprocessing.Event's.

    The read end of a pipe whose write end only the command holds: ``set()`` closes the
    write end, and from then on the read end polls readable (end of file). Not
    multiprocessing.Event: its lock and condition are semaphores shared with the client,
    so a client killed (SIGKILL, or Ctrl-C) while it held the lock or waited on the
    condition (which counts its sleepers) leaves the command's ``set()`` blocked for
    ever. Closing a pipe never blocks, whatever became of the client; and a client whose
    command died sees the end of file too, and stops. ``close()`` (the command, once the
    client is gone) frees the descriptors."""

    def __init__(self):
        self._reader, self._writer = CTX.Pipe(duplex=False)

    def __getstate__(self):  # the client gets the read end only (spawn pickles it)
        return {"_reader": self._reader, "_writer": None}

    def set(self):
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()

    def is_set(self):
        return self.wait(0.0)

    def wait(self, timeout=None):
        """Whether the stop is set, waiting up to ``timeout`` seconds (None: until it is)."""
        return self._reader.closed or self._reader.poll(timeout)

    def close(self):
        self.set()
        self._reader.close()


def start_client(process):
    """Start ``process`` (a ``CTX.Process``) with SIGINT blocked in it for its whole life
    (the signal mask passes through fork and exec, as CPython starts its resource tracker):
    Ctrl-C on a terminal, which signals the command's whole process group, then stops the
    command alone, which stops the client through its ``StopEvent`` (SIGKILL when it
    overstays), instead of raising KeyboardInterrupt at a random point of the client (in a
    ring's commit, printing a stack trace). A SIGINT that arrives meanwhile reaches the
    command once the mask is back."""
    # spawn starts the resource tracker first if it is not running, and unblocks SIGINT
    # in this thread once it has: started now, before the mask, it leaves the mask alone
    multiprocessing.resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def value_of(producer, seq):
    """The value producer ``producer`` sends as number ``seq``: ``p3:000123``."""
    return f"p{producer}:{seq:06d}"


def padded(value, size):
    """``value`` as the bytes a producer of ``size``-byte records sends: ``value#size#``
    again and again up to ``size`` bytes (a record that lost, gained or changed bytes no
    longer matches); ``value`` alone when it does not need padding."""
    head = f"{value}#{size}#".encode()
    if size <= len(head):
        return value.encode()
    return (head * (size // len(head) + 1))[:size]


def record_text(raw):
    """A read record's value as its history holds it: the value itself, or for a padded
    one ``<value>#<bytes>`` (``<value>#damaged`` when it is not what ``padded`` made)."""
    value, sep, rest = raw.partition(PAD)
    text = value.decode("utf-8", "replace")
    if not sep:
        return text
    size = rest.partition(PAD)[0]
    whole = size.isdigit() and raw == padded(text, int(size))
    return f"{text}#{len(raw)}" if whole else f"{text}#damaged"


def parse_value(value):
    """(producer, seq) of a workload value (padded: ``record_text``'s); None for any
    other value (the divergence scenario's ``x...`` records, a damaged padded record, or
    garbage)."""
    value, sep, size = value.partition("#")
    if sep and not size.isdigit():
        return None
    if not value.startswith("p"):
        return None
    head, sep, tail = value[1:].partition(":")
    if not sep or not head.isdigit() or not tail.isdigit():
        return None
    return int(head), int(tail)


@dataclasses.dataclass(frozen=True)
class ClientSpec:
    """What one client process needs: where, what, its number and history file."""

    bootstrap: str
    topic: str
    partitions: int
    number: int
    history: str
    keyed: bool = True
    idempotent: bool = False
    #: a producer sends this many records, then stops (None: until its stop event)
    records: int | None = None
    #: and at most this many a second (None: as fast as its window lets it)
    rate: float | None = None
    #: what a consumer reads: its topic's records as which isolation level
    isolation_level: str = "read_uncommitted"
    #: a producer pads its values to this many bytes (0: none, ``padded``)
    value_bytes: int = 0
    #: a group member's consumer group (``member``)
    group: str | None = None


class HistoryWriter:
    """One client's history file: a JSON object per line, line buffered (module doc).
    Any thread may write (the producer's callbacks run in its sender thread)."""

    def __init__(self, path):
        self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 close()
        self._lock = threading.Lock()  # guards the file: one line at a time

    def write(self, **fields):
        """Write ``fields`` and the time ``t`` as one line; the line's object."""
        fields["t"] = time.time()
        line = json.dumps(fields, separators=(",", ":")) + "\n"
        with self._lock:
            if not self._file.closed:  # a late answer after close() is not recorded
                self._file.write(line)
        return fields

    def close(self):
        self._file.close()


def client_logging(spec):
    """The client's warnings (retries, reconnects) go to ``<history>.log`` beside its
    history, not to the terminal the tool reports on."""
    logging.basicConfig(filename=os.path.splitext(spec.history)[0] + ".log",
                        level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def produce(spec, stop):
    """Producer process: send until ``stop`` (a multiprocessing Event) is set or its
    ``spec.records`` are sent (at most ``spec.rate`` a second), then wait for the
    outstanding sends (each until its outcome is unknown). See ``Sends``."""
    client_logging(spec)
    set_process_role("chaos-producer", f"chaos-producer-{spec.number}")
    history = HistoryWriter(spec.history)
    producer = KafkaProducer(
        bootstrap_servers=spec.bootstrap, acks="all", retries=2**31 - 1,
        max_in_flight_requests_per_connection=IDEMPOTENT_IN_FLIGHT if spec.idempotent else 1,
        enable_idempotence=spec.idempotent, linger_ms=0,
        request_timeout_ms=REQUEST_TIMEOUT_MS, delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        max_block_ms=MAX_BLOCK_MS,
        max_request_size=max(1024 * 1024, spec.value_bytes + REQUEST_OVERHEAD),
        buffer_memory=max(32 * 1024 * 1024, 2 * (spec.value_bytes + REQUEST_OVERHEAD)))
    sends = Sends(producer, spec, history)
    started = time.monotonic()
    try:
        seq = 0
        while not stop.is_set() and (spec.records is None or seq < spec.records):
            due = 0.0 if spec.rate is None else started + seq / spec.rate - time.monotonic()
            if due > 0:
                sends.reap(wait=min(due, BLOCKED_WAIT))
            elif sends.send(seq):
                seq += 1
            else:
                sends.reap(wait=BLOCKED_WAIT)
        while sends.outstanding:
            sends.reap(wait=BLOCKED_WAIT)
    finally:
        producer.close(timeout=DELIVERY_TIMEOUT_MS / 1000)
        history.close()


class Sends:
    """One producer process's outstanding sends (owner: its main thread; the producer's
    sender thread runs the callbacks that record outcomes).

    At most ``WINDOW`` sends are outstanding, and a keyed producer keeps at most
    ``PER_PARTITION`` outstanding per partition: it learns which partition each key goes
    to from the answers and, when the next key's partition is full, takes the next key
    whose partition is not. A partition that is down then holds up only its own keys.
    """

    def __init__(self, producer, spec, history):
        self.producer = producer
        self.spec = spec
        self.history = history
        self.outstanding = collections.deque()  # (seq, future, partition, unknown at)
        self.per_partition = collections.Counter()
        self.key_partitions = {}  # key number -> partition (murmur2 does not change)
        self.window = max(1, min(WINDOW, WINDOW_BYTES // max(1, spec.value_bytes)))

    def send(self, seq):
        """Send record ``seq`` if there is room; whether it was sent (or failed at once)."""
        if len(self.outstanding) >= self.window:
            return False
        key = None
        if self.spec.keyed:
            number = self._free_key(seq)
            if number is None:
                return False
            key = f"k{number}".encode()
        future = send_one(self.producer, self.spec, seq, key, self.history)
        if future is not None:
            partition = partition_of(future)
            if key is not None:
                self.key_partitions[number] = partition
            self.per_partition[partition] += 1
            self.outstanding.append((seq, future, partition, time.monotonic() + OUTCOME_TIMEOUT))
        return True

    def _free_key(self, seq):
        for step in range(KEYS):
            number = (seq + step) % KEYS
            partition = self.key_partitions.get(number)
            if partition is None or self.per_partition[partition] < PER_PARTITION:
                return number
        return None

    def reap(self, wait=0.0):
        """Forget the sends that are done, record as unknown (``info``) those whose outcome
        is overdue; first wait up to ``wait`` seconds for the oldest."""
        if wait and self.outstanding:
            with contextlib.suppress(Exception):  # a failure: its errback recorded it
                self.outstanding[0][1].get(timeout=wait)
        now = time.monotonic()
        kept = collections.deque()
        for entry in self.outstanding:
            seq, future, partition, unknown_at = entry
            if future.is_done or now >= unknown_at:
                if not future.is_done:
                    self.history.write(op="info", p=self.spec.number, seq=seq,
                                       partition=partition)
                self.per_partition[partition] -= 1
            else:
                kept.append(entry)
        self.outstanding = kept


def send_one(producer, spec, seq, key, history):
    """Send record ``seq`` with ``key``, recording its invocation now and its outcome when
    the broker answers (the producer's thread runs the callbacks); its future, or None when
    it could not even be queued."""
    history.write(op="invoke", p=spec.number, seq=seq)
    try:
        future = producer.send(spec.topic, padded(value_of(spec.number, seq), spec.value_bytes),
                               key=key)
    except KafkaTimeoutError as exc:  # no metadata or buffer in max_block_ms: never queued
        history.write(op="fail", p=spec.number, seq=seq, partition=None, error=error_name(exc))
        return None
    partition = partition_of(future)
    future.add_callback(lambda metadata: history.write(
        op="ok", p=spec.number, seq=seq, partition=metadata.partition,
        offset=metadata.offset))
    future.add_errback(lambda exc: history.write(
        op="fail", p=spec.number, seq=seq, partition=partition, error=error_name(exc)))
    return future


def partition_of(future):
    """The partition a pending send went to: the partition of its batch, the first field
    of a FutureRecordMetadata (``cluster.producer.batch``)."""
    batch, *_ = future
    return batch.partition


def consume(spec, stop):
    """Consumer process: read every partition from the start until ``stop`` is set (as
    ``spec.isolation_level``)."""
    client_logging(spec)
    set_process_role("chaos-consumer", f"chaos-consumer-{spec.number}")
    history = HistoryWriter(spec.history)
    positions = dict.fromkeys(range(spec.partitions), 0)
    try:
        while not stop.is_set():
            try:
                _read(spec, positions, stop, history)
            except Exception as exc:  # recorded; the client is made again
                history.write(op="error", c=spec.number, error=error_name(exc))
                stop.wait(RETRY_PAUSE)
    finally:
        history.close()


def _read(spec, positions, stop, history):
    consumer = KafkaConsumer(bootstrap_servers=spec.bootstrap, enable_auto_commit=False,
                             isolation_level=spec.isolation_level,
                             auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(spec.topic, p) for p in range(spec.partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, positions[tp.partition])
        while not stop.is_set():
            for tp, records in consumer.poll(timeout_ms=100).items():
                for record in records:
                    history.write(op="read", c=spec.number, partition=tp.partition,
                                  offset=record.offset,
                                  value=record_text(record.value))
                    positions[tp.partition] = record.offset + 1
    finally:
        consumer.close(autocommit=False)


def member(spec, stop):
    """Consumer-group member process (``group_consume``): subscribes to ``spec.topic`` in
    ``spec.group`` (no auto-commit, from the earliest offset when the group has none),
    and per poll records its reads, then commits their positions synchronously and
    records ``{"op": "commit", "c": n, "offsets": {partition: offset}}`` — Kafka's
    at-least-once consumer: what it committed it had processed. An error is recorded and
    the poll tried again (a KafkaConsumer makes its own way through rebalances)."""
    client_logging(spec)
    set_process_role("chaos-member", f"chaos-member-{spec.number}")
    history = HistoryWriter(spec.history)
    consumer = KafkaConsumer(bootstrap_servers=spec.bootstrap, group_id=spec.group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             isolation_level=spec.isolation_level,
                             session_timeout_ms=MEMBER_SESSION_TIMEOUT_MS,
                             heartbeat_interval_ms=MEMBER_SESSION_TIMEOUT_MS // 6)
    try:
        consumer.subscribe([spec.topic])
        while not stop.is_set():
            try:
                polled = consumer.poll(timeout_ms=100)
                for tp, records in polled.items():
                    for record in records:
                        history.write(op="read", c=spec.number, partition=tp.partition,
                                      offset=record.offset, value=record_text(record.value))
                if polled:
                    offsets = {tp.partition: records[-1].offset + 1
                               for tp, records in polled.items() if records}
                    consumer.commit()
                    history.write(op="commit", c=spec.number, offsets=offsets)
            except KafkaError as exc:  # recorded; the next poll goes on
                history.write(op="error", c=spec.number, error=error_name(exc))
                stop.wait(RETRY_PAUSE)
    finally:
        consumer.close(autocommit=False)
        history.close()


def error_name(exc):
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def drain(bootstrap, topic, partitions, path, timeout, isolation_level="read_uncommitted"):
    """The final consumer (run in the command's process once the faults have stopped):
    read every partition from its start to its end offset (the high watermark of a
    read_uncommitted consumer, the last stable offset of a read_committed one), recording
    each read in ``path`` as consumer ``"drain"``, for at most ``timeout`` seconds.
    Returns ``{"high_watermarks": {partition: end offset}, "undrained": [partitions not
    read to their end]}``."""
    history = HistoryWriter(path)
    deadline = time.monotonic() + timeout
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = {}
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             isolation_level=isolation_level, auto_offset_reset="earliest")
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        while len(ends) < len(tps) and time.monotonic() < deadline:
            for tp in tps:
                if tp not in ends:
                    try:
                        ends.update(consumer.end_offsets([tp], timeout_ms=1000))
                    except Exception as exc:  # offline for now: try again
                        history.write(op="error", c="drain", error=error_name(exc))
        pending = set(ends)
        while pending and time.monotonic() < deadline:
            try:
                polled = consumer.poll(timeout_ms=100)
            except Exception as exc:  # recorded; the deadline bounds it
                history.write(op="error", c="drain", error=error_name(exc))
                time.sleep(RETRY_PAUSE)
                continue
            for tp, records in polled.items():
                for record in records:
                    if record.offset < ends[tp]:
                        history.write(op="read", c="drain", partition=tp.partition,
                                      offset=record.offset,
                                      value=record_text(record.value))
            pending = {tp for tp in pending if consumer.position(tp) < ends[tp]}
    finally:
        consumer.close(autocommit=False)
        history.close()
    return {"high_watermarks": {tp.partition: end for tp, end in ends.items()},
            "undrained": sorted(tp.partition for tp in tps
                                if tp not in ends or tp in pending)}
