"""The files the shipper reads, and how it tells one file from another.

A file is identified by its device and inode plus a *fingerprint*: a hash of its first
``fingerprint_length`` bytes (at most ``FINGERPRINT_BYTES``), taken when the shipper first
sees the file with data. Paths are not identities: a renamed file keeps its identity, a new
file at an old path gets a new one, and a file truncated and rewritten in place
(copytruncate) no longer matches its fingerprint, so it is a new file read from position 0.
Two files with identical first lines differ by inode; an inode reused by a new file after a
delete differs by fingerprint, unless its first bytes are the same too — then a size below the
checkpointed position still tells (``tailer``).

``OsFiles`` reads the real file system (``glob``, ``stat``, ``open`` returning a handle that
reads at a position with ``os.pread``, so a renamed or deleted file stays readable until
closed). Tests pass a fake with the same three methods. Owner: the shipper's thread.
"""
from __future__ import annotations

import glob as _glob
import hashlib
import os
from typing import NamedTuple

#: How many first bytes of a file its fingerprint covers at most (Filebeat's default: 1024).
FINGERPRINT_BYTES = 1024


class FileStat(NamedTuple):
    """What the shipper needs of a ``stat``: who the file is, how long, and whether a name
    still points at it (``nlink`` 0: deleted while open)."""
    dev: int
    ino: int
    size: int
    nlink: int


def fingerprint(head: bytes) -> str:
    """The fingerprint of a file's first bytes (``head``): 16 hex digits."""
    return hashlib.blake2b(head, digest_size=8).hexdigest()


def file_id(dev: int, ino: int, print_: str) -> str:
    """The identity string of a file: ``<dev>:<ino>:<fingerprint>`` (the ``log.file.id``
    header and the checkpoint's key)."""
    return f"{dev}:{ino}:{print_}"


class OsHandle:
    """An open file, read at positions (``os.pread``); readable after a rename or delete."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY)

    def read_at(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def stat(self) -> FileStat:
        st = os.fstat(self._fd)
        return FileStat(st.st_dev, st.st_ino, st.st_size, st.st_nlink)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OsFiles:
    """The real file system."""

    def glob(self, pattern: str) -> list[str]:
        return sorted(p for p in _glob.glob(pattern) if os.path.isfile(p))

    def stat(self, path: str) -> FileStat | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return FileStat(st.st_dev, st.st_ino, st.st_size, st.st_nlink)

    def open(self, path: str) -> OsHandle:
        return OsHandle(path)
