"""A failing disk for the storage tests: ``DiskFaults(monkeypatch, root)``.

It wraps the ``os`` calls through which segments/ writes (``os.pwrite`` for .log and
index files, ``os.pwritev`` for large appends, ``os.write`` for checkpoints, ``os.open``
with ``O_CREAT`` of a file that does not exist yet, ``os.fsync``/``os.fdatasync``,
``os.ftruncate``) and acts only on files under ``root``; every other call goes straight
through. Operations have a kind:
``write`` (pwrite, pwritev, write), ``create``, ``sync`` (fsync, fdatasync) and ``truncate``.

``arm(at, error, kinds)`` makes the ``at``-th operation (0-based, counted from the arm)
of ``kinds`` fail with ``error`` (errno.ENOSPC, errno.EIO): a write first writes half of
its bytes and returns a short count, as a filling disk does, and the write that follows
raises. From then on every operation of ``kinds`` under ``root`` fails (a full disk stays
full) until ``clear()``. ``arm(None)`` only counts: ``seen`` lists ``(kind, call, file
name)`` of every operation of ``kinds`` since the last arm.

Not thread-safe beyond what the tests need: the log's background flusher only fsyncs,
which is counted only when ``sync`` is armed.
"""
from __future__ import annotations

import errno
import os

WRITES = ("write", "create")

_CALLS = (("pwrite", "write"), ("pwritev", "write"), ("write", "write"), ("open", "create"),
          ("fsync", "sync"), ("fdatasync", "sync"), ("ftruncate", "truncate"))


class DiskFaults:
    """Fails the operations on files under ``root`` that ``arm`` names (module doc)."""

    def __init__(self, monkeypatch, root):
        self.root = os.path.realpath(root) + os.sep
        self.kinds = frozenset()
        self.at = None
        self.error = errno.ENOSPC
        self.failing = False
        self.seen = []
        for call, kind in _CALLS:
            monkeypatch.setattr(os, call, self._wrap(getattr(os, call), call, kind))

    def arm(self, at, error=errno.ENOSPC, kinds=WRITES):
        self.at, self.error, self.kinds = at, error, frozenset(kinds)
        self.failing = False
        self.seen = []

    def clear(self):
        """The disk works again (space was freed)."""
        self.at = None
        self.failing = False
        self.kinds = frozenset()

    def _wrap(self, real, call, kind):
        def wrapper(*args, **kwargs):
            if kind not in self.kinds:
                return real(*args, **kwargs)
            if call == "open":
                path = os.fspath(args[0])
                if not args[1] & os.O_CREAT or os.path.exists(path):
                    return real(*args, **kwargs)
            else:
                path = _path_of(args[0])
            if path is None or not os.path.realpath(path).startswith(self.root):
                return real(*args, **kwargs)
            self.seen.append((kind, call, os.path.basename(path)))
            if not self.failing and self.at is not None and len(self.seen) - 1 == self.at:
                self.failing = True
                if call == "pwritev":  # the disk takes what fits first
                    total = sum(len(piece) for piece in args[1])
                    if total > 1:
                        return real(args[0], _first(args[1], total // 2), *args[2:])
                elif kind == "write" and len(args[1]) > 1:
                    with memoryview(args[1]) as data:
                        return real(args[0], data[:len(data) // 2], *args[2:])
            if self.failing:
                raise OSError(self.error, os.strerror(self.error),
                              path if call == "open" else None)
            return real(*args, **kwargs)
        return wrapper


def _first(pieces, count):
    """The first ``count`` bytes of the buffers ``pieces``, as a list of views."""
    out = []
    for piece in pieces:
        view = memoryview(piece)[:count]
        out.append(view)
        count -= len(view)
        if not count:
            break
    return out


def _path_of(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
