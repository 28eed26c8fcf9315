"""Is the process at the other end still the one that attached? (pid-reuse-safe)

A pid alone can be reused after its process dies, so an end is recorded as (pid, start time):
the start time is field 22 of /proc/<pid>/stat, in clock ticks since boot, fixed for the life of
a process. The end is alive when a process with that pid exists, has that start time and is
not a zombie (a SIGKILLed child stays a zombie until its parent reaps it).
"""
from __future__ import annotations

import os

_STARTTIME_FIELD = 22
"""1-based field number of starttime in /proc/<pid>/stat (proc(5))."""

_DEAD_STATES = frozenset({"Z", "X", "x"})
"""Process states of a process that has exited (zombie, dead)."""


def process_start_time(pid: int) -> int | None:
    """Start time of a running (non-zombie) process, or None when there is no such process."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except (FileNotFoundError, ProcessLookupError):
        return None
    try:
        stat = os.read(fd, 4096)
    except ProcessLookupError:  # the process went away between open and read
        return None
    finally:
        os.close(fd)
    # The command name (field 2) is in parentheses and may contain spaces or ")".
    fields = stat[stat.rindex(b")") + 2:].split()
    if fields[0].decode() in _DEAD_STATES:
        return None
    return int(fields[_STARTTIME_FIELD - 3])


def current_process() -> tuple[int, int]:
    """(pid, start time) of the calling process."""
    pid = os.getpid()
    start_time = process_start_time(pid)
    assert start_time is not None  # we are running
    return pid, start_time


def is_alive(pid: int, start_time: int) -> bool:
    """True while the process that recorded (pid, start_time) is running."""
    return process_start_time(pid) == start_time
