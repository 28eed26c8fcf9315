"""How long a broker's start took, phase by phase, in wall time and in CPU time: the one
``start-up:`` line a broker logs when it serves (``perf/cluster_start_bench.py`` reads it).

::

    broker 0 start-up: process 0.412 s (CPU 0.398), config 0.004 s (CPU 0.004), ...,
    total 0.530 s (CPU 0.489)

The first phase, ``process``, runs from the process's creation to ``main()``: the
interpreter's start and the imports of an exec'd broker, the fork and ``runpy`` of one
forked by the zygote (``cluster.supervisor.zygote`` sets ``RINGLOG_FORKED_AT``, the
monotonic time of the fork; otherwise the kernel's start time of the process, to 10 ms).
CPU time is ``time.process_time()`` (a forked child's starts at zero), the figure a loaded
machine does not distort. Owner: the broker's main thread, once, during start-up.
"""
from __future__ import annotations

import os
import time

FORKED_AT_ENV = "RINGLOG_FORKED_AT"


def process_started_at():
    """``time.monotonic()`` of this process's creation (fork or exec)."""
    forked_at = os.environ.pop(FORKED_AT_ENV, None)
    if forked_at is not None:
        return float(forked_at)
    try:
        with open("/proc/self/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # seconds after boot
        ago = time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, IndexError):
        return time.monotonic()
    return time.monotonic() - max(0.0, ago)


class StartupTiming:
    """Marks at the end of each start-up phase: ``mark(name)``; ``line()`` says them."""

    def __init__(self, started_at=None):
        self._last_wall = process_started_at() if started_at is None else started_at
        self._first_wall = self._last_wall
        self._last_cpu = 0.0
        self.phases = []  # (name, wall seconds, CPU seconds)

    def mark(self, name):
        wall, cpu = time.monotonic(), time.process_time()
        self.phases.append((name, wall - self._last_wall, cpu - self._last_cpu))
        self._last_wall, self._last_cpu = wall, cpu

    def line(self):
        parts = [f"{name} {wall:.3f} s (CPU {cpu:.3f})" for name, wall, cpu in self.phases]
        parts.append(f"total {self._last_wall - self._first_wall:.3f} s "
                     f"(CPU {self._last_cpu:.3f})")
        return ", ".join(parts)
