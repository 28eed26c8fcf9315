"""The values every peer sends: random upper-case bytes (as Kafka's producer-perf-test
makes them), from a pool made once per client process and reused in turn, so making
values costs nothing per record.

``BULK_BYTES`` is the unit of the peers' bulk paths (workload 3): a Redis pipeline, a pyzmq
frame, a multiprocessing.Queue item carry about 100 KB of values each.
"""
from __future__ import annotations

import numpy as np

#: Distinct values per pool.
POOL = 1024
#: Most bytes of one pool: large values (1 MB) get fewer distinct ones than POOL.
POOL_BYTES = 32 << 20
#: Bytes of values per bulk unit of the peers (100 KB).
BULK_BYTES = 100_000


def rows(size, count=POOL, seed=0):
    """``count`` values of ``size`` bytes as the rows of a uint8 array."""
    return np.random.default_rng(seed).integers(65, 91, size=(count, size), dtype=np.uint8)


def pool(size, count=POOL, seed=0):
    """``count`` values of ``size`` bytes as a list of bytes (fewer for large values: at
    most POOL_BYTES in all, at least 2)."""
    count = min(count, max(2, POOL_BYTES // max(1, size)))
    return [row.tobytes() for row in rows(size, count, seed)]


def bulk_records(size):
    """Records of ``size`` bytes per bulk unit (at least one)."""
    return max(1, BULK_BYTES // size)


def units(total, per_unit):
    """The record counts of ``total`` records in units of ``per_unit`` (the last may be
    short)."""
    full, rest = divmod(total, per_unit)
    return [per_unit] * full + ([rest] if rest else [])
