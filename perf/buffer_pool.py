"""BufferPool cost per batch buffer, against its peers measured in the same run.

    .venv/bin/python -m perf.buffer_pool [--pairs N] [--repeats R]

Each figure is the median over R repeats of the cost of one allocate + deallocate pair
(ns), for a 16 KB batch buffer (Kafka's default batch.size) out of 32 MB (buffer.memory):

* pool hit        - BufferPool.allocate(batch_size) served from the free list, then returned
* fresh bytearray - what kafka-python 3 does per batch: a new zeroed bytearray, dropped after
* bare free list  - the floor for any locked pool: deque pop/append under one threading.Lock
* pool, 100 bytes - a non-poolable size (reserve, new buffer outside the lock, release)
* pool, 2 threads - two threads allocating and returning on one pool (contended lock, GIL)

A fresh bytearray is cheap in CPython (glibc hands back a recently freed chunk, even with
many buffers in flight), so recycling does not buy speed here as it does on the JVM; the
pool is for the bound on memory and the back-pressure. What it adds over the bare free list
is the per-buffer bookkeeping (the lent-buffer map that catches a second return).
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import deque

from cluster.producer.buffer_pool import BufferPool

BATCH = 16384
MEMORY = 32 * 1024 * 1024


def pool_hit(n):
    pool = BufferPool(MEMORY, BATCH)
    allocate, deallocate = pool.allocate, pool.deallocate
    deallocate(allocate(BATCH, 0))
    t0 = time.perf_counter_ns()
    for _ in range(n):
        deallocate(allocate(BATCH, 0))
    return (time.perf_counter_ns() - t0) / n


def pool_small(n):
    pool = BufferPool(MEMORY, BATCH)
    allocate, deallocate = pool.allocate, pool.deallocate
    t0 = time.perf_counter_ns()
    for _ in range(n):
        deallocate(allocate(100, 0))
    return (time.perf_counter_ns() - t0) / n


def fresh_bytearray(n):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        buf = bytearray(BATCH)
        del buf
    return (time.perf_counter_ns() - t0) / n


def bare_free_list(n):
    lock, free = threading.Lock(), deque([bytearray(BATCH)])
    t0 = time.perf_counter_ns()
    for _ in range(n):
        with lock:
            buf = free.pop()
        with lock:
            free.append(buf)
    return (time.perf_counter_ns() - t0) / n


def pool_two_threads(n):
    pool = BufferPool(MEMORY, BATCH)
    start = threading.Barrier(3)

    def loop():
        allocate, deallocate = pool.allocate, pool.deallocate
        start.wait()
        for _ in range(n // 2):
            deallocate(allocate(BATCH, 1000))

    threads = [threading.Thread(target=loop) for _ in range(2)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter_ns()
    for t in threads:
        t.join()
    return (time.perf_counter_ns() - t0) / n


CASES = {
    "pool hit": pool_hit,
    "fresh bytearray": fresh_bytearray,
    "bare free list": bare_free_list,
    "pool, 100 bytes": pool_small,
    "pool, 2 threads": pool_two_threads,
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    runs = {name: [] for name in CASES}
    for _ in range(args.repeats):  # interleave the cases so noise hits all alike
        for name, case in CASES.items():
            runs[name].append(case(args.pairs))
    med = {name: statistics.median(v) for name, v in runs.items()}
    print(f"allocate+deallocate of a {BATCH}-byte buffer, "
          f"median of {args.repeats} x {args.pairs} pairs")
    for name, ns in med.items():
        spread = f"{min(runs[name]):.0f}-{max(runs[name]):.0f}"
        print(f"  {name:16s} {ns:8.0f} ns/pair   (range {spread})   "
              f"x{ns / med['pool hit']:.2f} of pool hit")
    print(f"pool hit costs {med['pool hit'] / med['fresh bytearray']:.2f}x a fresh bytearray and "
          f"{med['pool hit'] / med['bare free list']:.2f}x a bare locked free list")


if __name__ == "__main__":
    main()
