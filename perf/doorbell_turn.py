"""CPU per turn of a broker's loop against the number of connections it holds.

Run from the repository root::

    .venv/bin/python -m perf.doorbell_turn [--connections 1,16,64,256] [--turns 20000]

One process: a Listener (the broker's end) and N client connections to it, opened by a
thread. A *turn* is what the broker's loop does with the listener each time round when no
request came: ``wait(0)`` (its spin: ``ringlog.spin.iterations`` looks at whatever the wait
watches), ``ready()`` and ``reap()``. A *busy turn* is the same after one client wrote one
request, which the turn reads and releases. Thread CPU time (``time.thread_time``), so a busy
machine distorts it little; median of ``--repeats`` runs, in µs per turn. For A/B, run the
same file with ``PYTHONPATH`` at each checkout.
"""
from __future__ import annotations

import argparse
import os
import secrets
import statistics
import threading
import time

from cluster.config.keys import DEFAULT_SPIN_ITERATIONS
from shm_ring import Listener, connect
from shm_ring.naming import cleanup_stale
from shm_ring.wakeup import WaitPolicy


def _open(cluster_id, listener, count, policy):
    clients = []
    opener = threading.Thread(target=lambda: clients.extend(
        connect(cluster_id, 1, timeout=30, capacity=1 << 14, policy=policy)
        for _ in range(count)))
    opener.start()
    deadline = time.monotonic() + 60
    while len(listener.connections) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(listener.connections)} of {count} connections accepted")
        listener.wait(0.01)
        listener.accept_pending()
    opener.join(60)
    listener.wait(0)
    listener.ready()
    listener.reap()
    return clients


def _turns(listener, turns, client=None):
    wait, ready, reap = listener.wait, listener.ready, listener.reap
    started = time.thread_time()
    for _ in range(turns):
        if client is not None:
            client.send(b"x" * 64, 1.0)
        wait(0)
        for connection in ready():
            while connection.recv() is not None:
                pass
            connection.release()
        reap()
    return (time.thread_time() - started) / turns * 1e6


def measure(count, turns, repeats):
    cluster_id = "turn" + secrets.token_hex(4)
    policy = WaitPolicy(spin=DEFAULT_SPIN_ITERATIONS, poll_interval=0.05)
    listener = Listener(cluster_id, 1, policy=policy)
    clients = []
    try:
        clients = _open(cluster_id, listener, count, policy)
        idle = statistics.median(_turns(listener, turns) for _ in range(repeats))
        busy = statistics.median(_turns(listener, turns, clients[-1]) for _ in range(repeats))
        return idle, busy
    finally:
        for client in clients:
            client.close()
        listener.close()
        cleanup_stale(cluster_id)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", default="1,16,64,256")
    parser.add_argument("--turns", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"load {os.getloadavg()[0]:.1f}; µs of CPU per turn (median of {args.repeats})")
    print(f"{'connections':>12} {'idle turn':>10} {'busy turn':>10}")
    for count in (int(c) for c in args.connections.split(",")):
        idle, busy = measure(count, args.turns, args.repeats)
        print(f"{count:>12} {idle:>10.1f} {busy:>10.1f}", flush=True)


if __name__ == "__main__":
    main()
