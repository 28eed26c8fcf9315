"""CPU per request of the ring paths each process takes, in one process, and the Python calls
they make: what a request and its response cost in the connection layer (shm_ring).

    .venv/bin/python -m perf.ring_cost [--chunks 200] [--chunk 1000] [--size 200]

One Listener (the broker's end) and one client connection to it, opened by a thread, as
``perf.doorbell_turn`` does; nobody parks, so every wake-up is the flag check a busy peer
costs (no semaphore post). The steps, each timed by itself over ``--chunk`` requests:

* ``client claim+commit``: ``ClientConnection.claim`` of ``--size`` bytes and ``commit`` (the
  producer's sender thread writing a request in place; the broker's doorbell flag check);
* ``broker recv+release``: ``Connection.recv`` and ``release`` of that request (one per
  request: the broker's loop releases after each turn);
* ``broker try_send``: ``Connection.try_send`` of a ``--size``-byte response (with the
  client's wake-up check);
* ``broker claim+commit``: ``Connection.claim`` and ``commit`` (a Fetch response in place);
* ``client recv+release``: ``ClientConnection.recv(0.0)`` and ``release`` of one response;
* ``notify``: ``WakeSlot.notify`` with nobody parked (the fence and the flag load);
* ``request``: a whole round — client claim+commit, broker recv+release, broker try_send,
  client recv+release.

Printed: thread CPU ns per step (``time.thread_time_ns``, whose own cost, printed first, is
in each figure), the median over ``--chunks`` chunks (chunks short enough that most run
without the machine's other work in them), and the calls per step (``sys.setprofile``:
Python frames, and C functions called from Python). The path (compiled or pure Python,
``shm_ring.accel.describe()``) is printed first. For an A/B, run alternately with
``PYTHONPATH`` at two checkouts, or with ``RINGLOG_NO_ACCEL=1`` against unset.
"""
from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import threading
import time

from shm_ring import Listener, connect
from shm_ring.naming import cleanup_stale
from shm_ring.wakeup import WaitPolicy


def _open(cluster_id, policy):
    listener = Listener(cluster_id, 1, policy=policy)
    clients = []
    opener = threading.Thread(target=lambda: clients.append(
        connect(cluster_id, 1, timeout=30, capacity=1 << 20, policy=policy)))
    opener.start()
    deadline = time.monotonic() + 60
    while not listener.connections:
        if time.monotonic() > deadline:
            raise TimeoutError("the connection was not accepted")
        listener.wait(0.01)
        listener.accept_pending()
    opener.join(60)
    return listener, clients[0], listener.connections[0]


def steps(client, broker, size):
    """name -> a function doing one step (the state each leaves is what the next needs)."""
    request = bytes(size)
    response = bytes(size)
    notify = client._doorbell.slot.notify

    def client_write():
        slot = client.claim(size, 1.0)
        slot[:size] = request
        slot.release()
        client.commit(size)

    def broker_read():
        frame = broker.recv()
        del frame
        broker.release()

    def broker_send():
        broker.try_send(response)

    def broker_claim():
        view = broker.claim(size)
        view[:size] = response
        view.release()
        broker.commit()

    def client_read():
        frame = client.recv(0.0)
        del frame
        client.release()

    def round_trip():
        client_write()
        broker_read()
        broker_send()
        client_read()

    # (name, the step, the step that drains what it left, timed step first or drain first)
    return [
        ("client claim+commit", client_write, broker_read, True),
        ("broker recv+release", broker_read, client_write, False),
        ("broker try_send", broker_send, client_read, True),
        ("broker claim+commit", broker_claim, client_read, True),
        ("client recv+release", client_read, broker_send, False),
        ("notify (nobody parked)", notify, None, True),
        ("request (all four)", round_trip, None, True),
    ]


def chunk_ns(step, other, first, chunk):
    """Thread CPU ns of ``step`` alone, per call, over ``chunk`` calls interleaved with
    ``other`` (not timed)."""
    clock = time.thread_time_ns
    spent = 0
    for _ in range(chunk):
        if other is not None and not first:
            other()
        started = clock()
        step()
        spent += clock() - started
        if other is not None and first:
            other()
    return spent / chunk


def calls(step, other, first):
    """(Python frames, C functions) called by one ``step`` (sys.setprofile's "call" and
    "c_call" events; a compiled method called from Python may not be reported as a C call,
    the frames it saves are)."""
    if other is not None and not first:
        other()
    frames, functions = [0], [0]

    def profile(frame, event, arg):
        if event == "call":
            frames[0] += 1
        elif event == "c_call":
            functions[0] += 1
    sys.setprofile(profile)
    try:
        step()
    finally:
        sys.setprofile(None)
    if other is not None and first:
        other()
    return frames[0], functions[0] - 1  # setprofile(None) itself


def _timer_ns():
    clock = time.thread_time_ns
    samples = []
    for _ in range(1000):
        started = clock()
        samples.append(clock() - started)
    return statistics.median(samples)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m perf.ring_cost",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--chunk", type=int, default=1000)
    parser.add_argument("--size", type=int, default=200)
    args = parser.parse_args(argv)
    try:
        from shm_ring.accel import describe
    except ImportError:  # a checkout from before the compiled ring paths
        def describe():
            return "pure Python (no shm_ring.accel)"
    cluster_id = "rcost" + secrets.token_hex(4)
    policy = WaitPolicy(spin=20, poll_interval=0.05)
    listener, client, broker = _open(cluster_id, policy)
    try:
        print(f"load {os.getloadavg()[0]:.1f}; ring paths: {describe()}; timer "
              f"{_timer_ns():.0f} ns (included); thread CPU ns per step, median of "
              f"{args.chunks} chunks of {args.chunk}")
        table = steps(client, broker, args.size)
        for name, step, other, first in table:
            for _ in range(100):  # warm up
                chunk_ns(step, other, first, 1)
            figures = [chunk_ns(step, other, first, args.chunk) for _ in range(args.chunks)]
            frames, functions = calls(step, other, first)
            print(f"{name:>24} {statistics.median(figures):>8.0f} ns {frames:>4} Python "
                  f"frames {functions:>4} C calls", flush=True)
    finally:
        client.close()
        listener.close()
        cleanup_stale(cluster_id)


if __name__ == "__main__":
    main()
