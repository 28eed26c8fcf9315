"""pyzmq PUSH/PULL over ``ipc://``: fast, keeps nothing on disk, no acknowledgement.

* channels are ipc endpoints ``<dir>/chan-<n>.ipc``; a consumer's PULL socket binds its
  channels, a producer's PUSH socket connects to its channels (and deals its messages
  round-robin over them when it has several); default high-water marks (1,000 messages);
* record by record: one ``send`` / ``recv`` per record;
* bulk: batched frames — one frame carries ``payloads.bulk_records(size)`` fixed-size values
  back to back (1,000 of 100 bytes: 100 KB), which the consumer counts by length and could
  view as a 2-D array, as ringlog's ``poll_batches`` gives columns. (Multipart messages,
  one frame per record, measured about 7× slower than record-by-record sends here: pyzmq
  loops in Python over the frames.);
* latency: one ``send`` per record at the fixed rate.

A producer's time ends when its last send returned (the messages are queued, not yet
received: ZeroMQ has no acknowledgement); the consumers' figures are the ones to compare.
Producers keep their sockets open until every consumer is done: closing a PUSH socket
right after its last send lost a few hundred messages of one pipe in about one run in ten
here (pyzmq 27.3, libzmq 4.3.5), the PULL side never receiving them.
No server: ``server_pids`` is empty.
"""
from __future__ import annotations

import shutil
import tempfile

from perf.suite import latency, payloads

NAME = "zmq_pushpull"
DESCRIPTION = "pyzmq PUSH/PULL over ipc://, not durable; send/recv, bulk 100 KB frames"
#: Messages a consumer takes without waiting before it looks at the shared count again.
DRAIN = 1000
POLL_MS = 100


def missing(options):
    import zmq  # noqa: F401 -- ImportError: the peer is skipped, saying why
    return None


class Deployment:
    """A directory for the ipc endpoints; nothing runs. ``stop()`` removes it."""

    def __init__(self, workdir, channels):
        self.dir = tempfile.mkdtemp(prefix="zmq-", dir=workdir)
        self.endpoint = {"addresses": [f"ipc://{self.dir}/chan-{n}.ipc"
                                       for n in range(channels)]}

    leftovers = ()

    def server_pids(self):
        return []

    def stop(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def deploy(workdir, channels, brokers, options):
    return Deployment(workdir, channels)


def produce(endpoint, task, gate):
    import zmq
    context = zmq.Context()
    sock = context.socket(zmq.PUSH)
    gate.wait_consumers()  # connect once the PULL sockets are bound: no reconnect delay
    for channel in task.channels:
        sock.connect(endpoint["addresses"][channel])
    send = sock.send
    if task.latency:
        first = latency.send_paced(send, task, gate)
    elif task.bulk:
        per_frame = payloads.bulk_records(task.size)
        frame = payloads.rows(task.size, per_frame).tobytes()
        gate.ready()
        first = latency.clock_ns()
        for count in payloads.units(task.records, per_frame):
            send(frame[:count * task.size], copy=False)
    else:
        pool = payloads.pool(task.size)
        n = len(pool)
        gate.ready()
        first = latency.clock_ns()
        for i in range(task.records):
            send(pool[i % n])
    last = latency.clock_ns()
    gate.wait_finished()  # a PUSH closed with messages in flight may lose some (module doc)
    sock.close(linger=-1)
    context.term()
    return {"records": task.records, "first_ns": first, "last_ns": last}


def consume(endpoint, task, gate):
    import zmq
    context = zmq.Context()
    sock = context.socket(zmq.PULL)
    for channel in task.channels:
        address = endpoint["addresses"][channel]
        sock.bind(address)
    recorder = latency.Recorder(task.records) if task.latency else None
    receive = sock.recv
    count = 0
    first = last = None
    gate.ready()
    try:
        while not gate.expired():
            if not sock.poll(POLL_MS):
                if gate.received(count):
                    break
                continue
            got = []
            try:
                for _ in range(DRAIN):
                    got.append(receive(zmq.NOBLOCK))
            except zmq.Again:
                pass
            now = last = latency.clock_ns()  # after the values arrived
            first = now if first is None else first
            if task.bulk:
                count += sum(map(len, got)) // task.size
            else:
                count += len(got)
                if recorder is not None:
                    recorder.record(got, now)
            if gate.received(count):
                break
    finally:
        sock.close(linger=0)
        context.term()
    return latency.receiver_figures(count, first, last, recorder)
