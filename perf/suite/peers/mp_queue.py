"""``multiprocessing.Queue`` (spawn context): a pipe, pickling and a feeder thread; keeps
nothing on disk.

* channels are queues of at most ``MAXSIZE`` items made by the suite and handed to the
  client processes when they are spawned; each client uses one queue;
* record by record: ``put`` / ``get`` per record;
* bulk: ``put`` of a list of ``payloads.bulk_records(size)`` values (100 KB), ``get`` of the
  list;
* latency: ``put`` per record at the fixed rate.

A producer's time ends when its feeder thread has written everything to the pipe
(``close`` + ``join_thread``). No server: ``server_pids`` is empty.
"""
from __future__ import annotations

import multiprocessing
import queue

from perf.suite import latency, payloads

NAME = "mp_queue"
DESCRIPTION = "multiprocessing.Queue, not durable; put/get per record, bulk 100 KB lists"
MAXSIZE = 1000
#: Items a consumer takes without waiting before it looks at the shared count again.
DRAIN = 1000
GET_TIMEOUT = 0.1


def missing(options):
    return None


class Deployment:
    """The queues of one case; nothing runs. ``stop()`` closes them (safe twice)."""

    def __init__(self, channels):
        context = multiprocessing.get_context("spawn")
        self.queues = [context.Queue(MAXSIZE) for _ in range(channels)]
        self.endpoint = {"queues": self.queues}

    leftovers = ()

    def server_pids(self):
        return []

    def stop(self):
        for q in self.queues:
            q.close()
            q.join_thread()


def deploy(workdir, channels, brokers, options):
    return Deployment(channels)


def _queue(endpoint, task):
    if len(task.channels) != 1:
        raise ValueError(f"a multiprocessing.Queue client uses one queue, found channels "
                         f"{task.channels}")
    return endpoint["queues"][task.channels[0]]


def produce(endpoint, task, gate):
    q = _queue(endpoint, task)
    put = q.put
    if task.latency:
        first = latency.send_paced(put, task, gate)
    elif task.bulk:
        pool = payloads.pool(task.size, payloads.bulk_records(task.size))
        gate.ready()
        first = latency.clock_ns()
        for count in payloads.units(task.records, len(pool)):
            put(pool[:count])
    else:
        pool = payloads.pool(task.size)
        n = len(pool)
        gate.ready()
        first = latency.clock_ns()
        for i in range(task.records):
            put(pool[i % n])
    q.close()
    q.join_thread()
    last = latency.clock_ns()
    return {"records": task.records, "first_ns": first, "last_ns": last}


def consume(endpoint, task, gate):
    q = _queue(endpoint, task)
    get, get_nowait = q.get, q.get_nowait
    recorder = latency.Recorder(task.records) if task.latency else None
    count = 0
    first = last = None
    gate.ready()
    while not gate.expired():
        try:
            got = [get(timeout=GET_TIMEOUT)]
        except queue.Empty:
            if gate.received(count):
                break
            continue
        try:
            for _ in range(DRAIN):
                got.append(get_nowait())
        except queue.Empty:
            pass
        now = last = latency.clock_ns()  # after the values arrived
        first = now if first is None else first
        if task.bulk:
            count += sum(map(len, got))
        else:
            count += len(got)
            if recorder is not None:
                recorder.record(got, now)
        if gate.received(count):
            break
    return latency.receiver_figures(count, first, last, recorder)
