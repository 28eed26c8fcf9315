"""The two sparse indexes of a segment: ``OffsetIndex`` (.index) and ``TimeIndex`` (.timeindex).

Layouts are in ``index_descriptor``. An index is a sorted array of fixed-size entries;
lookups are binary searches that return the greatest entry whose key is <= the target.

How the bytes are kept differs from Kafka's preallocated mmap, for the same guarantees:

- While its segment is active an index is *mutable*: the entries live in a ``bytearray``
  and reach the file only at ``flush()`` (the segment's flush), which writes the new
  tail and fsyncs. The file therefore never holds preallocated zeros that a crash could
  leave behind, and there is nothing to trim on close.
- Once its segment is sealed an index is *immutable*: the file is complete, and it is
  memory-mapped read-only the first time it is searched (so opening a log with many
  segments maps nothing it does not read).

Files are opened on use: the mutable index's descriptor when entries are written, the map
when the sealed one is searched. Each open calls ``on_open`` (its segment registers in the
process's ``file_cache``), and ``release_file()`` (the cache's eviction) closes the
descriptor or the map, keeping the entries in memory; the next use opens the file again.

The index is never checksummed. ``sanity_check()`` (Kafka's rules, checked over the whole
file at once when its segment is opened) rejects a file whose length is not a multiple of
the entry size, or whose entries do not strictly increase in every field, or fall outside
the segment (a negative relative offset, a position outside the .log); the log then
rebuilds it from the ``.log``. A flip that keeps the entries sorted passes that check: the
segment catches it when it uses the entry (``segment.Segment``).

Thread safety: none. An index belongs to its ``Segment``, which belongs to the
``PartitionLog``'s single owning thread.
"""
from __future__ import annotations

import mmap
import os

import numpy as np

from segments import durability, index_descriptor as d
from segments.errors import LogDirFailureError, StorageError, describe_os_error

NO_TIMESTAMP = -1


class CorruptIndexError(StorageError):
    """An index file whose length or entries cannot be right; the log rebuilds it."""


def fsync_file(call, fd, path):
    """``call(fd)`` (os.fsync or os.fdatasync) for the file at ``path``;
    LogDirFailureError if it fails: the kernel may then have dropped the pages it could not
    write, so nothing in memory says what the file holds any more."""
    try:
        call(fd)
    except OSError as e:
        e.filename = path
        raise LogDirFailureError(f"fsync of {path} failed with {describe_os_error(e)}") from e


class _EntryFile:
    """Sorted fixed-size entries backed by a file (the machinery both indexes share)."""

    ENTRY = None  # a struct.Struct, set by the subclass

    def __init__(self, path, base_offset, max_index_size, mutable=True, on_open=None):
        self.path = os.fspath(path)
        #: Called after the index opened its file (its segment's ``file_cache`` hook).
        self._on_open = on_open
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_entries = max_index_size // self.entry_size
        self._fd = None
        self._mmap = None
        try:
            self._file_size = os.stat(self.path).st_size
            #: Whether the file was there when the index was opened (a missing one is rebuilt).
            self.file_existed = True
        except FileNotFoundError:
            self._file_size = 0
            self.file_existed = False
        self._entries = self._file_size // self.entry_size
        # The bytearray mirror of a mutable index, else None; _flushed = its bytes on disk.
        self._mirror = None
        self._flushed = 0
        self._last = None  # the last entry's fields, cached for the append path
        if mutable:
            self.make_mutable()

    # -- state ----------------------------------------------------------------------------

    @property
    def entries(self):
        return self._entries

    @property
    def mutable(self):
        return self._mirror is not None

    def is_full(self):
        return self._entries >= self.max_entries

    def _buffer(self):
        """The bytes holding the entries: the mirror, or the (lazily mapped) file."""
        if self._mirror is not None:
            return self._mirror
        if self._mmap is None and self._entries:
            with open(self.path, "rb") as f:
                self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self._opened()
        return self._mmap

    def _opened(self):
        if self._on_open is not None:
            self._on_open()

    def entry(self, n):
        """The raw fields of entry ``n`` (relative offsets not yet made absolute)."""
        if not 0 <= n < self._entries:
            raise IndexError(f"{self.path}: entry {n} of {self._entries}")
        return self.ENTRY.unpack_from(self._buffer(), n * self.entry_size)

    def _last_fields(self):
        """The fields of the last entry, or None when there is none."""
        if self._last is None and self._entries:
            self._last = self.entry(self._entries - 1)
        return self._last

    def search(self, field, target):
        """Binary search: the number of the greatest entry whose ``field`` is <= ``target``
        (entries are sorted on every field), or -1."""
        buf = self._buffer()
        unpack = self.ENTRY.unpack_from
        size = self.entry_size
        lo, hi = 0, self._entries - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) >> 1
            if unpack(buf, mid * size)[field] <= target:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    # -- mutation -------------------------------------------------------------------------

    def _append_raw(self, *fields):
        self._mirror += self.ENTRY.pack(*fields)
        self._entries += 1
        self._last = fields

    def truncate_entries(self, n):
        """Keep only the first ``n`` entries."""
        if n >= self._entries:
            return
        self.make_mutable()
        del self._mirror[n * self.entry_size:]
        self._entries = n
        self._last = None
        if self._flushed > len(self._mirror):
            self._flushed = len(self._mirror)
            os.ftruncate(self._file_fd(), self._flushed)
            self._file_size = self._flushed

    def reset(self):
        """Drop every entry (before a rebuild)."""
        self.truncate_entries(0)

    def make_mutable(self):
        """Load the file into the in-memory mirror so entries can be appended or dropped."""
        if self._mirror is not None:
            return
        self._release_mmap()
        whole = self._entries * self.entry_size
        mirror = bytearray()
        if whole:
            with open(self.path, "rb") as f:
                mirror = bytearray(f.read(whole))
            whole = len(mirror) - len(mirror) % self.entry_size
            del mirror[whole:]
            self._entries = whole // self.entry_size
            self._last = None
        self._mirror = mirror
        self._flushed = whole
        self._file_fd()  # creates the file: even an empty index has one
        if self._file_size != whole:
            # A partial trailing entry (a torn write): drop it from the file as well.
            os.ftruncate(self._file_fd(), whole)
            self._file_size = whole

    def make_immutable(self):
        """Write out the entries and release the mirror; later reads map the file."""
        if self._mirror is None:
            return
        self.write_tail()
        self._mirror = None
        self._close_fd()

    def _file_fd(self):
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            self._opened()
        return self._fd

    def write_tail(self):
        """Write the entries not yet in the file (no fsync). A failed write raises the
        OSError naming the file and changes nothing in memory: bytes it wrote past the
        file's entries are the same entries (a later write covers them) or a partial
        one (``make_mutable`` drops it; ``sanity_check`` rejects it)."""
        if self._mirror is None or self._flushed == len(self._mirror):
            return
        fd = self._file_fd()
        with memoryview(self._mirror) as view:
            tail = view[self._flushed:]
            position = self._flushed
            try:
                while tail:
                    written = os.pwrite(fd, tail, position)
                    tail = tail[written:]
                    position += written
            except OSError as e:
                e.filename = self.path
                raise
            finally:
                tail.release()
        self._flushed = len(self._mirror)
        self._file_size = self._flushed

    def flush(self):
        """Write the entries not yet in the file and fsync it (``fsync_file``)."""
        if self._mirror is not None and self._flushed != len(self._mirror):
            self.write_tail()
            fsync_file(durability.fsync, self._file_fd(), self.path)

    def _release_mmap(self):
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    def _close_fd(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def release_file(self):
        """Close the descriptor or the map; the entries stay, and the next use reopens."""
        self._release_mmap()
        self._close_fd()

    def close(self):
        """Write out pending entries (no fsync: ``flush`` is for durability) and release."""
        self.write_tail()
        self.release_file()

    def rename(self, new_path):
        os.rename(self.path, new_path)
        self.path = os.fspath(new_path)

    def delete(self):
        """Release the file and unlink it; safe to call twice."""
        self._mirror = None
        self.release_file()
        self._entries = 0
        self._last = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _checked_entries(self):
        """Every entry as a numpy structured array (``DTYPE``), after checking the file's
        length; raise CorruptIndexError naming the file otherwise. A copy: no view of the
        mapped file outlives the call."""
        if self._file_size % self.entry_size:
            raise CorruptIndexError(
                f"{self.KIND} {self.path}: length {self._file_size} is not a multiple of "
                f"the entry size {self.entry_size}")
        buf = self._buffer()
        data = bytes(buf[:self._entries * self.entry_size]) if self._entries else b""
        return np.frombuffer(data, dtype=self.DTYPE)

    def _check_increasing(self, entries, field):
        """Raise CorruptIndexError unless ``entries[field]`` strictly increases."""
        values = entries[field].astype(np.int64)
        bad = np.flatnonzero(values[1:] <= values[:-1])
        if bad.size:
            n = int(bad[0]) + 1
            raise CorruptIndexError(
                f"{self.KIND} {self.path}: entry {n} has {field} {values[n]} after "
                f"{values[n - 1]}; entries must strictly increase")


class OffsetIndex(_EntryFile):
    """Maps the last offset of an indexed batch to the batch's position in the .log."""

    ENTRY = d.OFFSET_ENTRY
    DTYPE = d.OFFSET_ENTRY_DTYPE
    KIND = "offset index"

    def append(self, offset, position):
        """Add an entry; offsets and positions must grow (raises ValueError otherwise)."""
        if self._entries >= self.max_entries:
            raise ValueError(f"offset index {self.path} is full ({self._entries} entries)")
        relative = offset - self.base_offset
        if not 0 <= relative <= d.MAX_RELATIVE_OFFSET:
            raise ValueError(
                f"offset index {self.path}: offset {offset} is outside "
                f"[{self.base_offset}, {self.base_offset + d.MAX_RELATIVE_OFFSET}]")
        last = self._last_fields()
        if last is not None:
            last_relative, last_position = last
            if relative <= last_relative or position <= last_position:
                raise ValueError(
                    f"offset index {self.path}: entry (offset {offset}, position "
                    f"{position}) does not follow (offset "
                    f"{self.base_offset + last_relative}, position {last_position})")
        self._append_raw(relative, position)

    def lookup(self, offset):
        """``(offset, position)`` of the greatest entry with offset <= ``offset``,
        or ``(base_offset, 0)`` when there is none."""
        n = self.search(0, offset - self.base_offset)
        if n < 0:
            return self.base_offset, 0
        relative, position = self.entry(n)
        return self.base_offset + relative, position

    def last_entry(self):
        last = self._last_fields()
        if last is None:
            return self.base_offset, 0
        return self.base_offset + last[0], last[1]

    def truncate_to(self, offset):
        """Drop every entry whose offset is >= ``offset``."""
        self.truncate_entries(self.search(0, offset - self.base_offset - 1) + 1)

    def sanity_check(self, log_size):
        """Raise CorruptIndexError unless the file could describe a log of ``log_size``
        bytes: whole entries, offsets and positions strictly increasing, relative offsets
        >= 0, positions inside the log after its first batch (which is never indexed)."""
        entries = self._checked_entries()
        if not entries.size:
            return
        self._check_increasing(entries, "offset")
        self._check_increasing(entries, "position")
        first, last = entries[0], entries[-1]
        if first["offset"] < 0 or first["position"] <= 0 or last["position"] >= log_size:
            raise CorruptIndexError(
                f"offset index {self.path}: entries from (relative offset "
                f"{first['offset']}, position {first['position']}) to ({last['offset']}, "
                f"{last['position']}) fall outside the segment (log size {log_size})")


class TimeIndex(_EntryFile):
    """Maps the largest timestamp seen so far to the offset of the batch that holds it."""

    ENTRY = d.TIME_ENTRY
    DTYPE = d.TIME_ENTRY_DTYPE
    KIND = "time index"

    def maybe_append(self, timestamp, offset, skip_full_check=False):
        """Add ``(timestamp, offset)`` if the timestamp is larger than the last entry's.

        ``skip_full_check`` lets a segment being sealed record its largest timestamp even
        when the index is full (Kafka does the same).
        """
        if not skip_full_check and self._entries >= self.max_entries:
            raise ValueError(f"time index {self.path} is full ({self._entries} entries)")
        last = self._last_fields()
        if last is not None:
            last_timestamp, last_relative = last
            if timestamp <= last_timestamp:
                return
            if offset - self.base_offset < last_relative:
                raise ValueError(
                    f"time index {self.path}: offset {offset} is below the last entry's "
                    f"{self.base_offset + last_relative}")
        elif timestamp == NO_TIMESTAMP:
            return
        relative = offset - self.base_offset
        if not 0 <= relative <= d.MAX_RELATIVE_OFFSET:
            raise ValueError(
                f"time index {self.path}: offset {offset} is outside "
                f"[{self.base_offset}, {self.base_offset + d.MAX_RELATIVE_OFFSET}]")
        self._append_raw(timestamp, relative)

    def last_entry(self):
        """``(timestamp, offset)`` of the last entry, or ``(NO_TIMESTAMP, base_offset)``."""
        last = self._last_fields()
        if last is None:
            return NO_TIMESTAMP, self.base_offset
        return last[0], self.base_offset + last[1]

    def truncate_to(self, offset):
        """Drop every entry whose offset is >= ``offset``."""
        self.truncate_entries(self.search(1, offset - self.base_offset - 1) + 1)

    def sanity_check(self):
        """Raise CorruptIndexError unless the file holds whole entries, timestamps and
        offsets strictly increase and relative offsets are >= 0."""
        entries = self._checked_entries()
        if not entries.size:
            return
        self._check_increasing(entries, "timestamp")
        self._check_increasing(entries, "offset")
        if entries[0]["offset"] < 0:
            raise CorruptIndexError(
                f"time index {self.path}: first entry's relative offset "
                f"{entries[0]['offset']} < 0")
