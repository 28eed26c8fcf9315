"""Whether this process's storage fsyncs: the one switch every fsync of ``segments`` (and
of the broker's partition directories, through ``checkpoint.fsync_directory``) goes through.

``fsync(fd)`` / ``fdatasync(fd)`` are ``os.fsync`` / ``os.fdatasync`` while ``ENABLED``
is true (the default). A broker sets it from ``ringlog.fsync`` before it opens any log
(``replica_proc.broker``); the ``dev`` profile (``cluster.config.profiles``) turns it off,
as Redpanda's developer mode does: then nothing written is ever forced to disk, and a
machine's crash (not a broker's: the page cache survives that) may lose acknowledged
records or leave logs that recovery truncates. For test suites only.

Owner: the process; set once at start, read by any thread.
"""
from __future__ import annotations

import os

ENABLED = True


def set_enabled(enabled: bool) -> None:
    global ENABLED
    ENABLED = bool(enabled)


def fsync(fd: int) -> None:
    if ENABLED:
        os.fsync(fd)


def fdatasync(fd: int) -> None:
    if ENABLED:
        os.fdatasync(fd)
