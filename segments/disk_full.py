"""A full disk under a partition log, written to the broker's log once per episode.

A write that fails for lack of space (ENOSPC, or EDQUOT for a quota) and undoes itself
leaves the partition unable to take appends (each gets KAFKA_STORAGE_ERROR, retriable)
until space is freed; one that cannot be undone (a failed fsync) takes the log offline.
Either way the first failure of an episode logs a WARNING naming the partition, the
directory and the bytes free there (``statvfs``: what an unprivileged writer may still
use), and the first append that succeeds afterwards logs that the partition healed, with
the bytes free then. Later failures of the same episode add nothing: a producer retrying
against a full disk does not flood the log.

Owner: the ``PartitionLog`` whose writes it watches (its one writer thread).
"""
from __future__ import annotations

import errno
import logging
import os

log = logging.getLogger(__name__)

_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged process may still write on the file system of ``path``, or
    None if it cannot be asked."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def caused_by_full_disk(error: BaseException | None) -> bool:
    """Whether ``error``, or an error it was raised from, is a lack of space."""
    seen = 0
    while error is not None and seen < 8:  # a chain, never a cycle worth following far
        if isinstance(error, OSError) and error.errno in _NO_SPACE:
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


class DiskFullWatch:
    """Whether the partition ``name`` (log directory ``path``) is in a full-disk episode;
    ``failed`` and ``succeeded`` log its start and its end (module doc)."""

    __slots__ = ("name", "path", "full")

    def __init__(self, name: str, path: str) -> None:
        self.name = name
        self.path = path
        self.full = False

    def failed(self, what: str, error: BaseException, offline: bool) -> None:
        """A disk operation ``what`` of the partition failed with ``error``; ``offline``:
        the log goes offline for it (it could not be undone)."""
        if self.full or not caused_by_full_disk(error):
            return
        self.full = True
        log.warning("partition %s: disk full under %s (%s bytes free): %s failed; %s",
                    self.name, self.path, _bytes(free_bytes(self.path)), what,
                    "the log goes offline until the broker restarts" if offline else
                    "appends fail with KAFKA_STORAGE_ERROR until there is space")

    def succeeded(self) -> None:
        """An append went through after a full-disk failure: the partition healed."""
        self.full = False
        log.warning("partition %s: disk has space again under %s (%s bytes free); appends "
                    "go through", self.name, self.path, _bytes(free_bytes(self.path)))


def _bytes(count: int | None) -> str:
    return "unknown" if count is None else str(count)
