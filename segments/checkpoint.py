"""Checkpoint files: small text files replaced atomically (Kafka's layout, plus a CRC).

A checkpoint file holds a version line, a count line, one line per entry whose fields are
separated by single spaces, and a last line with the CRC-32C of every byte before it::

    0
    2
    my-topic-0 4242
    other-topic-3 17
    crc32c 0x1b2e3f40

Kafka writes ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``leader-epoch-checkpoint`` and ``replication-offset-checkpoint`` in this layout without
the CRC line; ringlog writes the first three, and ``cleaner-offset-checkpoint``
(``segments.cleaner``), in each partition directory, and the last (``topic partition
offset`` lines, ``replica_proc.high_watermark_checkpoint``) in the broker's log directory.
The CRC line is ringlog's: without it a flipped digit reads as another offset, and a log
start offset moved up hides acknowledged records. A file without it (written before it
existed) is still read; a flipped byte cannot remove it, only break it.

Reading is strict: ASCII only, the version line exactly, a count line and offsets in plain
decimal (no sign, no leading zero, no ``_``), each entry's key (its first ``key_fields``
fields: a name, or a topic and a partition) once, the CRC matching.
Anything else raises KafkaStorageError naming the file, the line and what was expected;
the reader's owner falls back as Kafka does (an unreadable recovery point means
validating the whole log, an unreadable log start offset means the first segment's base
offset, an unreadable cleaner offset means cleaning from the start) and never deletes data
because of it. A write goes to ``<name>.tmp``, is fsynced, renamed over ``<name>`` and the
directory is fsynced, so a reader sees either the old file or the new one, never a mix; a
crash can leave a stale ``.tmp``, which the next write replaces.

``CheckpointFile`` does no locking: its owner (the one thread that owns the directory's
log) is the only writer.
"""
from __future__ import annotations

import ctypes
import os
import re

from crc32c import crc32c

from segments import durability
from segments.errors import KafkaStorageError

TMP_SUFFIX = ".tmp"
#: A count or an offset: plain decimal, no sign, no leading zero (what ``str(int)`` writes).
_DECIMAL = re.compile(r"0|[1-9][0-9]*")
#: The last line: the CRC-32C of every byte before it.
CRC_PREFIX = "crc32c "
_CRC_LINE = re.compile(re.escape(CRC_PREFIX) + r"0x([0-9a-f]{8})")


class CheckpointFile:
    """One checkpoint file at ``path`` with entries of ``fields`` fields each, keyed by
    their first ``key_fields``."""

    def __init__(self, path, version=0, fields=2, key_fields=1):
        self.path = os.fspath(path)
        self.version = version
        self.fields = fields
        self.key_fields = key_fields

    def write(self, entries, durable=True, in_place=False):
        """Replace the file with ``entries`` (tuples of ``fields`` values without spaces);
        ``durable=False``: see ``write_atomically``; ``in_place``: see ``write_in_place``
        (``durable`` is then ignored)."""
        lines = [str(self.version), str(len(entries))]
        for entry in entries:
            texts = [str(field) for field in entry]
            if len(texts) != self.fields or any(not t or " " in t or "\n" in t
                                                for t in texts):
                raise ValueError(
                    f"checkpoint {self.path}: entry {entry!r} must have {self.fields} "
                    f"non-empty fields without spaces")
            lines.append(" ".join(texts))
        body = ("\n".join(lines) + "\n").encode()
        data = body + f"{CRC_PREFIX}0x{crc32c(body):08x}\n".encode()
        if in_place:
            write_in_place(self.path, data)
        else:
            write_atomically(self.path, data, durable)

    def read(self):
        """The entries as tuples of strings; ``[]`` if the file does not exist.

        Raises KafkaStorageError naming the file, the line and what was expected when
        the version, the count or an entry does not check out.
        """
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError as e:
            line = data.count(b"\n", 0, e.start) + 1
            raise KafkaStorageError(
                f"checkpoint {self.path} line {line}: byte {data[e.start]:#04x} at position "
                f"{e.start} is not ASCII") from None
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if lines and lines[-1].startswith(CRC_PREFIX):
            match = _CRC_LINE.fullmatch(lines[-1])
            body = data[:data.rfind(b"\n", 0, len(data) - 1) + 1]
            if match is None or int(match.group(1), 16) != crc32c(body):
                raise KafkaStorageError(
                    f"checkpoint {self.path} line {len(lines)}: {lines[-1]!r}, expected "
                    f"{CRC_PREFIX}0x{crc32c(body):08x}, the CRC-32C of the lines before it")
            lines.pop()
        if len(lines) < 2:
            raise KafkaStorageError(
                f"checkpoint {self.path}: expected a version line and a count line, "
                f"found {len(lines)} line(s)")
        if lines[0] != str(self.version):
            raise KafkaStorageError(
                f"checkpoint {self.path} line 1: version {lines[0]!r}, expected "
                f"{self.version}")
        if not _DECIMAL.fullmatch(lines[1]) or int(lines[1]) != len(lines) - 2:
            raise KafkaStorageError(
                f"checkpoint {self.path} line 2: count line {lines[1]!r}, but "
                f"{len(lines) - 2} entry line(s) follow")
        entries = []
        names = set()
        for number, line in enumerate(lines[2:], start=3):
            fields = tuple(line.split(" "))
            if len(fields) != self.fields or not all(fields):
                raise KafkaStorageError(
                    f"checkpoint {self.path} line {number}: {line!r}, expected "
                    f"{self.fields} fields separated by single spaces")
            key = fields[:self.key_fields]
            if key in names:
                raise KafkaStorageError(
                    f"checkpoint {self.path} line {number}: {line!r}, a second entry for "
                    f"{' '.join(key)!r}")
            names.add(key)
            entries.append(fields)
        return entries


class OffsetCheckpoint:
    """A checkpoint of ``name offset`` entries, read and written as a dict."""

    def __init__(self, path):
        self.file = CheckpointFile(path, version=0, fields=2)

    @property
    def path(self):
        return self.file.path

    def write(self, offsets, durable=True, in_place=False):
        self.file.write(sorted(offsets.items()), durable, in_place)

    def read(self):
        """``{name: offset}``; raises KafkaStorageError on a malformed file."""
        result = {}
        for number, (name, offset) in enumerate(self.file.read(), start=3):
            if not _DECIMAL.fullmatch(offset):
                raise KafkaStorageError(
                    f"checkpoint {self.path} line {number}: offset {offset!r} of {name!r} "
                    f"is not a non-negative decimal integer")
            result[name] = int(offset)
        return result


def write_atomically(path, data, durable=True):
    """Replace the file at ``path`` with ``data`` (bytes) so readers see the old or the new
    content only, after a crash too: temp file, fsync, rename, fsync of the directory.

    ``durable=False`` skips both fsyncs: only for a file in a directory nobody reads
    before its creator has synced it (``sync_filesystem``), such as a new partition
    directory being staged."""
    path = os.fspath(path)
    tmp = path + TMP_SUFFIX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            durability.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_directory(os.path.dirname(path) or ".")


def write_in_place(path, data):
    """Write ``data`` over the file at ``path`` (created if missing) and cut it to that
    length: no temp file, rename or fsync. Replacing a file by rename costs about a
    millisecond on ext4 (``auto_da_alloc`` starts the new file's writeback), which makes
    closing 10,000 logs take tens of seconds; this costs a hundredth of that. Only for a
    checkpoint that nothing trusts before its writer syncs the file system
    (``segments.log.close_together``: no clean-shutdown marker until then): a crash
    can leave old and new bytes mixed, which the checkpoint's CRC line rejects."""
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        position = 0
        while position < len(data):
            position += os.pwrite(fd, view[position:], position)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def fsync_directory(path):
    """fsync a directory so that a rename or unlink in it survives a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        durability.fsync(fd)
    finally:
        os.close(fd)


def _load_syncfs():
    try:
        syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (AttributeError, OSError):  # not Linux
        return None
    syncfs.argtypes = [ctypes.c_int]
    return syncfs


_syncfs = _load_syncfs()


def sync_filesystem(path):
    """Make everything written on the file system holding ``path`` durable — file data,
    new files and directories, renames — with one syncfs(2) (``os.sync()`` where there is
    none): one call instead of an fsync per file and directory, for creating many files at
    once. An error (EIO; Linux >= 5.8 reports writeback errors) raises OSError. Nothing
    while ``durability`` is off."""
    if not durability.ENABLED:
        return
    if _syncfs is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        if _syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}", path)
    finally:
        os.close(fd)
