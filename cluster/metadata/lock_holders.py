"""Who holds an flock(2) on a file: /proc/locks, read when a lock is refused.

A failed ``flock(LOCK_NB)`` only says "someone"; an error message must say who, and must not
blame a pid from a file such as broker.json (that process may be long dead while some other
process holds the lock, e.g. another user's shared lock on a world-readable lock file).
The kernel lists every lock in /proc/locks (proc(5)), one line each::

    1: FLOCK  ADVISORY  WRITE 4711 fe:00:2146595 0 EOF
    2: -> FLOCK  ADVISORY  WRITE 4712 fe:00:2146595 0 EOF     (a waiter, not a holder)

fields: id, class, mode, access, the pid that took the lock (in this pid namespace; 0 when
that process is gone or outside it), device major:minor in hex and inode, range. A holder is
an FLOCK line without ``->`` whose device and inode are the file's.

``describe_holders(path)`` names them for a message: ``pid N (command ...)`` for a process of
this user, ``a process of another user (uid U ...)`` otherwise, and never a pid that is not
running: a lock taken by a process that has exited (a child inherited the descriptor) or that
this user cannot see is described as such, without a pid.

Pure reads of /proc: any thread may call them; called on failure paths only.
"""
from __future__ import annotations

import os
import pwd

from shm_ring.liveness import process_start_time

PROC_LOCKS = "/proc/locks"

UNSEEN = ("a process this user cannot see (another user's, or one that inherited the lock "
          "from the process that took it)")
"""How a holder is described whose pid /proc/locks cannot give or that is not running."""

COMMAND_CHARS = 120
"""A holder's command line is quoted up to this many characters."""


def flock_holder_pids(path, proc_locks=PROC_LOCKS):
    """Pids /proc/locks gives for the flock holders of the file at ``path`` (0 for a holder
    whose pid it cannot give), in order; [] if the file or /proc/locks cannot be read."""
    try:
        st = os.stat(path)
        with open(proc_locks, "rb") as file:
            lines = file.read().decode("ascii", errors="replace").splitlines()
    except OSError:
        return []
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device:
            pids.append(int(fields[4]))
    return pids


def describe_process(pid):
    """``pid N (command ...)``, ``a process of another user (...)``, or, for a pid that is
    not running or not visible, words that name no pid."""
    if pid <= 0 or process_start_time(pid) is None:
        return UNSEEN
    try:
        with open(f"/proc/{pid}/status", "rb") as file:
            status = file.read().decode("utf-8", errors="replace")
        uid = next(int(line.split()[1]) for line in status.splitlines()
                   if line.startswith("Uid:"))
    except (OSError, StopIteration, ValueError):
        return UNSEEN
    if uid != os.getuid():
        try:
            name = f" {pwd.getpwuid(uid).pw_name}"
        except KeyError:
            name = ""
        return f"a process of another user (uid {uid}{name}, pid {pid})"
    return f"pid {pid} (command {command_line(pid)})"


def command_line(pid):
    """The command line of ``pid``, spaces between arguments, control characters escaped
    (a message stays one line), shortened; "unknown" when it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            raw = file.read()
    except OSError:
        return "unknown"
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", errors="replace")
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
    if not text:
        return "unknown"
    return text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS - 3] + "..."


def describe_holders(path):
    """``held by ...`` for the lock on ``path``: every holder /proc/locks names, described by
    ``describe_process`` (``held by a process /proc/locks does not list`` if none: it let go
    meanwhile, or /proc is not mounted)."""
    pids = flock_holder_pids(path)
    if not pids:
        return "held by a process /proc/locks does not list"
    return "held by " + ", ".join(dict.fromkeys(describe_process(pid) for pid in pids))
