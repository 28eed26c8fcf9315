"""Wall-clock time in milliseconds since the epoch, the unit of record timestamps (Kafka's
``Time.SYSTEM.milliseconds()``).

``wall_clock_ms`` is the default clock of whatever stamps or ages records by the wall
clock: the partition log (segment rolling, retention, append times), the group and
transaction coordinators (member and transaction deadlines, the records they write) and
the controller (its records' timestamps). Each takes a clock argument instead, so tests
pass a fake one; intervals within a process are measured on ``time.monotonic``, never on
this.
"""
from __future__ import annotations

import time


def wall_clock_ms():
    """Milliseconds since the epoch, now."""
    return time.time_ns() // 1_000_000
