"""One segment of a partition log: ``<base>.log`` plus its ``.index``, ``.timeindex`` and
``.txnindex``.

A segment holds the batches whose offsets are >= its base offset and below the next
segment's base offset. Files are named by the base offset in 20 digits
(``00000000000000000000.log``). The ``.log`` holds only whole, validated RecordBatch v2
batches, back to back, exactly as producers and leaders wrote them; the indexes are
sparse (layouts in ``index_descriptor``):

- an offset index entry every ``index.interval.bytes`` of log: before a batch is written,
  if more than ``index.interval.bytes`` have been written since the last entry, the batch
  gets an entry (its last offset, its position) — the first batch of a segment never
  does;
- next to each offset index entry, a time index entry if the largest timestamp seen so far
  grew; sealing the segment (``seal()``) adds one last entry carrying its largest
  timestamp.

The transaction index (``txn_index``: the transactions aborted by ABORT markers in the
segment) is appended to by the log, not by ``append``: its entries need the producer
state, which the log keeps; the segment carries it through flushes, truncation, renames
and deletion with the other files, and ``recover`` leaves it to the log to rebuild.

The indexing rule is deterministic, so ``recover()`` rebuilds exactly the entries that
``append()`` made, and can resume mid-segment from an index entry below the recovery
point instead of rescanning the whole segment.

Files are opened on use and kept open through the process's ``file_cache.FILES``, an LRU
bounded by ``ringlog.max.open.segment.files``: opening a segment stats its .log and
opens nothing (``create`` opens the new files), and a segment whose files the cache
released (``release_files``) reopens them the next time it reads or writes. Only
``close`` and ``delete`` end a segment: after them ``fd`` raises KafkaStorageError
instead of reopening.

A ``Segment`` does no validation of its own on append (the log validates each batch
header and CRC before calling it) and holds no lock. Owner: its ``PartitionLog``, whose
single owning thread is the only caller; a segment with ``mutable`` indexes is the active
one (or one being recovered, truncated or written by the cleaner).
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections import namedtuple

from segments import durability, index_descriptor as xd
from segments.errors import (
    CorruptRecordError,
    CorruptSegmentError,
    KafkaStorageError,
    LogDirFailureError,
    describe_os_error,
)
from segments.file_cache import FILES
from segments.index import (
    NO_TIMESTAMP,
    CorruptIndexError,
    OffsetIndex,
    TimeIndex,
    fsync_file,
)
from segments.record import batch_descriptor as bd
from segments.record.batch_header import BatchHeader
from segments.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
#: A segment being written by the cleaner; deleted if found at open.
CLEANED_SUFFIX = ".cleaned"
#: A cleaned segment that has replaced the ones it covers; completed if found at open.
SWAP_SUFFIX = ".swap"
#: Digits of the zero-padded base offset in a segment file name.
FILE_NAME_DIGITS = 20

#: Bytes read at a time when scanning batch headers.
_HEADER_SCAN_CHUNK = 4096
#: Most buffers one pwritev takes.
_IOV_MAX = os.sysconf("SC_IOV_MAX")
#: Bytes read at a time when validating whole batches.
_VALIDATE_CHUNK = 4 * 1024 * 1024

#: One batch as a scan of headers sees it.
BatchInfo = namedtuple("BatchInfo", "position size base_offset last_offset max_timestamp "
                                    "partition_leader_epoch")
#: Most appends whose first batch's place ``read`` knows without a lookup (``_recent``).
_RECENT_APPENDS = 64


def file_stem(base_offset):
    """``00000000000000000042`` for base offset 42."""
    return f"{base_offset:0{FILE_NAME_DIGITS}d}"


def base_offset_from_name(name):
    """The base offset a segment file name starts with (``000..042.log`` -> 42)."""
    stem = os.path.basename(name).split(".", 1)[0]
    if len(stem) != FILE_NAME_DIGITS or not stem.isdigit():
        raise ValueError(f"{name!r} is not named by a {FILE_NAME_DIGITS}-digit base offset")
    return int(stem)


#: Suffix of a segment file kept aside because it holds damaged batches, or batches after
#: them (after ``.log``; ``-2``, ``-3`` ... when the name is taken): never deleted.
DAMAGED_SUFFIX = ".damaged"


def free_damaged_name(log_path):
    """``log_path`` + DAMAGED_SUFFIX, or with ``-2``, ``-3`` ... if that name is taken."""
    path = log_path + DAMAGED_SUFFIX
    candidate, n = path, 1
    while os.path.lexists(candidate):
        n += 1
        candidate = f"{path}-{n}"
    return candidate


def segment_paths(directory, base_offset, suffix=""):
    """Paths of the .log, .index and .timeindex files of a segment (with ``suffix``)."""
    stem = os.path.join(os.fspath(directory), file_stem(base_offset))
    return (stem + LOG_SUFFIX + suffix, stem + INDEX_SUFFIX + suffix,
            stem + TIME_INDEX_SUFFIX + suffix)


def txn_index_path(directory, base_offset, suffix=""):
    """Path of the .txnindex file of a segment (with ``suffix``)."""
    return (os.path.join(os.fspath(directory), file_stem(base_offset)) + TXN_INDEX_SUFFIX
            + suffix)


def iter_file_batches(fd, start, end, chunk_size=_VALIDATE_CHUNK):
    """Yield ``(position, view)`` for each batch of the file between ``start`` and ``end``.

    ``view`` covers the whole batch, except for the last one yielded when the file does not
    hold what a batch's framing announces (torn write, garbage length): then ``view`` is
    whatever bytes remain, so ``BatchHeader(view).validate()`` raises and says why. A
    view is only valid until the next one is requested (the read buffer is reused).
    """
    buf = bytearray(max(bd.LOG_OVERHEAD, min(chunk_size, end - start)))
    position = start
    while position < end:
        want = min(len(buf), end - position)
        got = os.preadv(fd, [memoryview(buf)[:want]], position)
        if got <= 0:
            raise KafkaStorageError(f"read of {want} bytes at position {position} returned "
                                    f"{got}: the file is shorter than {end}")
        view = memoryview(buf)[:got]
        offset = 0
        while True:
            remaining = got - offset
            if remaining < bd.LOG_OVERHEAD:
                break
            length = bd.INT32.unpack_from(view, offset + bd.BATCH_LENGTH_OFFSET)[0]
            size = bd.LOG_OVERHEAD + length
            if length < bd.HEADER_SIZE - bd.LOG_OVERHEAD or size > end - position - offset:
                yield position + offset, view[offset:]  # framing is wrong: let the caller say so
                return
            if size > remaining:
                break
            yield position + offset, view[offset:offset + size]
            offset += size
        if offset == 0:
            if got == end - position:
                yield position, view  # fewer bytes than a batch prefix before the end
                return
            # A batch larger than the buffer: grow it and read again from this batch.
            length = (bd.INT32.unpack_from(view, bd.BATCH_LENGTH_OFFSET)[0]
                      if got >= bd.LOG_OVERHEAD else 0)
            buf = bytearray(max(2 * len(buf), bd.LOG_OVERHEAD + length))
        position += offset


class Segment:
    """The files of one segment and the state an appender needs (see the module doc)."""

    def __init__(self, directory, base_offset, config, now_ms, mutable, suffix="",
                 create=False):
        self.directory = os.fspath(directory)
        self.base_offset = base_offset
        self.config = config
        self.suffix = suffix
        log_path, index_path, time_index_path = segment_paths(directory, base_offset, suffix)
        self.log_path = log_path
        self._fd = None
        self._closed = False
        #: Holders of the raw descriptor across other opens (``pinned``); the cache skips them.
        self.pins = 0
        self.offset_index = self.time_index = None
        self.txn_index = TransactionIndex(txn_index_path(directory, base_offset, suffix),
                                          base_offset, verified=create)
        try:
            if create:
                self._fd = os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                self.size = 0
                FILES.opened(self)
            else:
                self.size = os.stat(log_path).st_size
            self.offset_index = OffsetIndex(index_path, base_offset,
                                            config.segment_index_bytes, mutable,
                                            on_open=self._opened)
            self.time_index = TimeIndex(time_index_path, base_offset,
                                        config.segment_index_bytes, mutable,
                                        on_open=self._opened)
        except BaseException:
            self._end()
            if create:  # undo the creation, so that creating it again can succeed
                self._unlink_files()
            raise
        self.created_ms = now_ms
        #: The largest batch maxTimestamp in the segment and the last offset of its batch.
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        #: The first batch's maxTimestamp, the base of segment.ms rolling (None: unknown).
        self.rolling_base_timestamp = None
        self.bytes_since_last_index_entry = 0
        self._next_offset = base_offset if create else None
        #: first offset -> BatchInfo (``partition_leader_epoch`` None) of the first batch
        #: of each of the last appends of this process (``append``'s ``first_offset``):
        #: a reader that keeps up asks for exactly such an offset (the log end it saw),
        #: and ``read`` then needs neither the index nor a read of the header. The last
        #: entry is the last append: every batch before its position ends below its
        #: offset, so ``translate_offset`` starts a lookup at or past that offset there
        #: (the read's bound at the high watermark) instead of at an offset index entry.
        #: Cleared when the file is cut (``truncate_to``, ``recover``) and when it grows
        #: past _RECENT_APPENDS entries (the append that cleared it then adds itself).
        self._recent = {}
        #: Bytes from position 0 not yet CRC-checked in this process (``verify``): the
        #: whole file of an opened segment, nothing of a created one (appends are
        #: validated before they are written).
        self.unverified_end = 0 if create else self.size
        #: The next segment's base offset (None for the last segment), which every
        #: offset of this one is below; kept by the log.
        self.next_base_offset = None
        self.unflushed = False
        #: Whether a lookup met an index entry that lies (warned about once).
        self._warned_index = False
        #: Whether the last ``recover`` cut the segment at damage (not a torn write).
        self.damaged = False
        #: Whether the last ``recover`` validated a control batch (a transaction marker:
        #: the log then rebuilds the transaction indexes).
        self.recovered_control_batch = False

    # -- opening --------------------------------------------------------------------------

    @classmethod
    def create(cls, directory, base_offset, config, now_ms, suffix=""):
        """A new, empty, active segment (the files must not exist yet)."""
        for path in (*segment_paths(directory, base_offset, suffix)[1:],
                     txn_index_path(directory, base_offset, suffix)):
            if os.path.exists(path):
                os.unlink(path)  # an index left by a segment that no longer exists
        return cls(directory, base_offset, config, now_ms, mutable=True, suffix=suffix,
                   create=True)

    @classmethod
    def open(cls, directory, base_offset, config, now_ms, active=False, suffix=""):
        """An existing segment; ``active`` loads its indexes for appending."""
        return cls(directory, base_offset, config, now_ms, mutable=active, suffix=suffix)

    # -- files (see file_cache) -----------------------------------------------------------

    @property
    def fd(self):
        """The .log's descriptor, reopened if the cache released it; valid until the next
        file this process opens (that may release it) unless the segment is ``pinned``."""
        fd = self._fd
        if fd is None:
            if self._closed:
                raise KafkaStorageError(f"segment {self.log_path} is closed")
            try:
                fd = self._fd = os.open(self.log_path, os.O_RDWR)
            except OSError as e:
                raise KafkaStorageError(f"segment {self.log_path}: reopening it failed with "
                                        f"{describe_os_error(e)}") from e
            self._opened()
        return fd

    @property
    def closed(self):
        """Whether ``close`` or ``delete`` ended the segment (a released one is not)."""
        return self._closed

    def _opened(self):
        FILES.opened(self)

    @contextlib.contextmanager
    def pinned(self):
        """Keep the files open for the block (the cache does not release a pinned segment)."""
        self.pins += 1
        try:
            yield self
        finally:
            self.pins -= 1

    def release_files(self):
        """Close the descriptors and maps (the cache's eviction); reopened on use."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
        for index in (self.offset_index, self.time_index):
            if index is not None:
                index.release_file()

    def sanity_check(self):
        """Raise CorruptIndexError unless both index files existed when the segment was
        opened and look right for this log: every entry follows Kafka's rules (one numpy
        pass over each file, ``index``), and the last entry of each names a batch of the
        log that agrees with it (a read of a few kilobytes)."""
        for index in (self.offset_index, self.time_index):
            if not index.file_existed:
                raise CorruptIndexError(f"segment {self.log_path}: {index.path} is missing")
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check()
        if self.offset_index.entries:
            offset, position = self.offset_index.last_entry()
            if self._named_batch(offset, position) is None:
                raise CorruptIndexError(
                    f"offset index {self.offset_index.path}: last entry (offset {offset}, "
                    f"position {position}) does not name the batch at that position")
        if self.time_index.entries:
            timestamp, offset = self.time_index.last_entry()
            if not self._time_entry_holds(timestamp, offset):
                raise CorruptIndexError(
                    f"time index {self.time_index.path}: last entry (timestamp "
                    f"{timestamp}, offset {offset}) does not match the batch holding "
                    f"offset {offset}")

    def load_tail_state(self):
        """Learn next offset, largest timestamp and indexing state from the indexes plus a
        scan of the batches after the last index entry (a few reads, not the segment)."""
        last_offset, position = self.offset_index.last_entry()
        timestamp, offset = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = timestamp, offset
        next_offset = self.base_offset
        if self.offset_index.entries:
            next_offset = last_offset + 1
        since = 0
        for info in self.headers(position):
            if info.max_timestamp > self.max_timestamp:
                self.max_timestamp = info.max_timestamp
                self.offset_of_max_timestamp = info.last_offset
            next_offset = info.last_offset + 1
            since += info.size
        self._next_offset = next_offset
        self.bytes_since_last_index_entry = since
        self.rolling_base_timestamp = self._first_batch_timestamp() if self.size else None

    def _first_batch_timestamp(self):
        data = os.pread(self.fd, bd.HEADER_SIZE, 0)
        if len(data) < bd.HEADER_SIZE:
            return None
        return bd.HEADER.unpack_from(data)[8]

    # -- reading --------------------------------------------------------------------------

    @property
    def next_offset(self):
        """One past the last offset in the segment (the base offset when it is empty)."""
        if self._next_offset is None:
            self.load_tail_state()
        return self._next_offset

    @property
    def tail_state_loaded(self):
        """Whether the next offset, largest timestamp and indexing state are known: a
        segment opened without them learns them on first use (``load_tail_state``)."""
        return self._next_offset is not None

    @property
    def largest_timestamp(self):
        """The largest batch timestamp in the segment (-1 when it has none)."""
        if self.offset_index.mutable:
            return self.max_timestamp
        return self.time_index.last_entry()[0]

    def headers(self, position, end=None):
        """Yield a BatchInfo for each batch from ``position`` (a batch start) to ``end``.

        Reads headers only, a chunk at a time; the bytes were validated on append or by
        recovery, so only what costs a comparison per batch is checked: the framing and
        that offsets strictly increase from the segment's base offset (baseOffset sits
        outside the CRC, so a flip there would silently renumber records). Either failing
        raises KafkaStorageError naming the file, the position and the offsets.
        """
        end = self.size if end is None else end
        header = bd.HEADER
        need = bd.HEADER_SIZE
        buf = b""
        buf_start = position
        previous_last = self.base_offset - 1
        while end - position >= need:
            rel = position - buf_start
            if rel + need > len(buf):
                # self.fd each time: between yields the cache may release the file
                buf = os.pread(self.fd, min(_HEADER_SCAN_CHUNK, end - position), position)
                buf_start, rel = position, 0
                if len(buf) < need:
                    raise KafkaStorageError(
                        f"segment {self.log_path}: {len(buf)} bytes at position {position}, "
                        f"expected a batch header")
            fields = header.unpack_from(buf, rel)
            size = bd.LOG_OVERHEAD + fields[1]
            if size > end - position:
                raise KafkaStorageError(
                    f"segment {self.log_path}: batch at position {position} of {size} bytes "
                    f"runs past the end ({end})")
            if fields[0] <= previous_last:
                raise KafkaStorageError(
                    f"segment {self.log_path}: batch at position {position} has baseOffset "
                    f"{fields[0]}, expected more than {previous_last} (offsets must "
                    f"increase from the segment's base offset {self.base_offset})")
            previous_last = fields[0] + fields[6]
            yield BatchInfo(position, size, fields[0], previous_last, fields[8], fields[2])
            position += size

    def verify(self):
        """CRC-check every batch this process has not checked yet (``unverified_end``
        bytes from position 0); raise CorruptSegmentError at the first bad one.

        Bytes written by an earlier life of the broker are trusted by the open (a clean
        shutdown) or by recovery only from the recovery point; a byte flipped on disk
        since would otherwise be served. So the first read of a segment in a process
        (``read``, ``find_timestamp``) checks all of it once: framing, CRC-32C and
        offsets that increase from the base offset and stay below the next segment's
        base offset (baseOffset sits outside the CRC). One sequential pass per segment per broker
        lifetime, never again (appends are validated before they are written): the
        cost of reading the file plus CRC-32C over it, paid by that first read (the
        figures for 1 GiB and 100 MB segments: ``python -m perf.log_bench``). Nothing
        is truncated or deleted: the caller takes the partition offline.
        """
        end = min(self.unverified_end, self.size)
        expected = self.base_offset
        with self.pinned():
            for position, view in iter_file_batches(self.fd, 0, end):
                try:
                    header = BatchHeader(view)
                    header.validate()
                    if header.base_offset < expected:
                        raise CorruptRecordError(
                            f"baseOffset {header.base_offset}, expected at least {expected}")
                    if header.last_offset - self.base_offset > xd.MAX_RELATIVE_OFFSET:
                        raise CorruptRecordError(
                            f"last offset {header.last_offset} does not fit a segment "
                            f"based at {self.base_offset}")
                    if (self.next_base_offset is not None
                            and header.last_offset >= self.next_base_offset):
                        raise CorruptRecordError(
                            f"last offset {header.last_offset} reaches the next segment's "
                            f"base offset {self.next_base_offset}")
                except CorruptRecordError as e:
                    error = CorruptSegmentError(
                        f"segment {self.log_path}: batch at position {position} (offset "
                        f"{expected} expected next): {_without_position(e)}")
                    error.position = position  # where the good batches end
                    raise error from e
                expected = header.next_offset
        self.unverified_end = 0

    def _named_batch(self, offset, position):
        """``(first, rest)`` for the offset index entry ``(offset, position)``: the BatchInfo
        of the batch at ``position`` and the generator of those after it — or None when
        that batch is not the one the entry names (or there is none, or it does not
        frame)."""
        if not 0 < position < self.size:
            return None
        scan = self.headers(position)
        try:
            first = next(scan, None)
        except KafkaStorageError:
            return None
        if first is None or first.last_offset != offset:
            return None
        return first, scan

    def _scan_from_entry(self, n, start_position=0):
        """headers() from offset index entry ``n`` (-1: none), or from ``start_position``
        when that is later.

        An index is never checksummed, and a flip that keeps its entries sorted passes the
        open-time sanity check; so an entry is used only if the batch at its position is
        the one it names — a comparison, the scan reads that header anyway — and otherwise
        the entry before it is tried (a WARNING, once per segment, names the file and
        the entry). Lookups therefore never trust a corrupt entry, whatever its bytes.
        """
        index = self.offset_index
        while n >= 0:
            relative, position = index.entry(n)
            if position <= start_position:
                break
            named = self._named_batch(self.base_offset + relative, position)
            if named is not None:
                yield named[0]
                yield from named[1]
                return
            if not self._warned_index:
                self._warned_index = True
                log.warning("segment %s: offset index %s entry %d (offset %d, position %d) "
                            "does not name the batch at that position; not using it",
                            self.log_path, index.path, n, self.base_offset + relative,
                            position)
            n -= 1
        yield from self.headers(start_position)

    def translate_offset(self, offset, start_position=0):
        """The first batch whose last offset is >= ``offset``, or None if there is none."""
        recent = self._recent
        last = recent[next(reversed(recent))] if recent else None  # the last append
        if last is not None and offset >= last.base_offset and last.position >= start_position:
            for info in self.headers(last.position):
                if info.last_offset >= offset:
                    return info
            return None
        n = self.offset_index.search(0, offset - self.base_offset)
        for info in self._scan_from_entry(n, start_position):
            if info.last_offset >= offset:
                return info
        return None

    def read(self, offset, max_bytes, max_offset=None, min_one_batch=True):
        """Where the whole batches to serve a read from ``offset`` are: ``(first, size)``.

        ``first`` is the BatchInfo of the batch holding ``offset`` (or the next one, past a
        compaction gap); ``size`` covers whole batches only, at most ``max_bytes`` — but at
        least the first batch when ``min_one_batch`` (KIP-74) — and none holding an offset
        >= ``max_offset``. Returns None when the segment has no batch at or past ``offset``.
        """
        FILES.touch(self)
        if self.unverified_end:
            self.verify()
        first = self._recent.get(offset)
        if first is not None:
            self._check_recent(first)
        else:
            first = self.translate_offset(offset)
            if first is None:
                return None
        if max_offset is not None and first.last_offset >= max_offset:
            return first, 0
        end = self._end_of_whole_batches(first, first.position + max_bytes)
        if end == first.position and min_one_batch:
            end = first.position + first.size
        if max_offset is not None and end > first.position + first.size:
            bound = self.translate_offset(max_offset, first.position)
            if bound is not None:
                end = min(end, bound.position)
        return first, end - first.position

    def _check_recent(self, info):
        """The header at ``info.position`` (an append of this process, ``_recent``) is still
        the batch appended there: same baseOffset, length and last offset — what a scan
        would have checked of it (baseOffset sits outside the CRC); KafkaStorageError
        naming the file and the offsets otherwise."""
        data = os.pread(self.fd, bd.HEADER_SIZE, info.position)
        if len(data) == bd.HEADER_SIZE:
            fields = bd.HEADER.unpack_from(data)
            if (fields[0] == info.base_offset and bd.LOG_OVERHEAD + fields[1] == info.size
                    and fields[0] + fields[6] == info.last_offset):
                return
            found = f"baseOffset {fields[0]}, {bd.LOG_OVERHEAD + fields[1]} bytes"
        else:
            found = f"{len(data)} bytes"
        raise KafkaStorageError(
            f"segment {self.log_path}: batch at position {info.position} has {found}; "
            f"appended there were offsets {info.base_offset}..{info.last_offset} in "
            f"{info.size} bytes")

    def _end_of_whole_batches(self, first, limit):
        """The largest batch boundary <= ``limit`` at or after the first batch."""
        if limit >= self.size:
            return self.size
        end = first.position
        for info in self._scan_from_entry(self.offset_index.search(1, limit), end):
            end = info.position  # a batch boundary <= limit
            if info.position + info.size > limit:
                break
            end = info.position + info.size
        return end

    def find_timestamp(self, timestamp, start_offset):
        """The first batch at or after ``start_offset`` whose maxTimestamp is >= ``timestamp``.

        The time index entry that starts the scan is used only if the batch holding its
        offset has its timestamp (``_scan_from_entry`` says why); else the one before it,
        with a WARNING once per segment.
        """
        if self.unverified_end:
            self.verify()
        n = self.time_index.search(0, timestamp)
        indexed_offset = self.base_offset
        while n >= 0:
            entry_timestamp, relative = self.time_index.entry(n)
            indexed_offset = self.base_offset + relative
            if indexed_offset < start_offset or self._time_entry_holds(entry_timestamp,
                                                                         indexed_offset):
                break
            if not self._warned_index:
                self._warned_index = True
                log.warning("segment %s: time index %s entry %d (timestamp %d, offset %d) "
                            "does not match the batch holding that offset; not using it",
                            self.log_path, self.time_index.path, n, entry_timestamp,
                            indexed_offset)
            indexed_offset = self.base_offset
            n -= 1
        start = max(indexed_offset, start_offset)
        for info in self._scan_from_entry(self.offset_index.search(0, start - self.base_offset)):
            if info.max_timestamp >= timestamp and info.last_offset >= start_offset:
                return info
        return None

    def _time_entry_holds(self, timestamp, offset):
        """Whether the batch holding ``offset`` has maxTimestamp ``timestamp`` (what a time
        index entry says)."""
        info = self.translate_offset(offset)
        return (info is not None and info.base_offset <= offset
                and info.max_timestamp == timestamp)

    def read_bytes(self, position, size):
        """``size`` bytes of the .log from ``position``."""
        out = bytearray(size)
        read_into(self.fd, memoryview(out), position)
        return out

    # -- writing --------------------------------------------------------------------------

    def should_roll(self, append_size, max_timestamp, last_offset, now_ms):
        """Kafka's rules: full by bytes, old by segment.ms, an index full, or an offset
        the indexes cannot hold relative to this segment's base."""
        if last_offset - self.base_offset > xd.MAX_RELATIVE_OFFSET:
            return True
        if not self.size:
            return False
        if self.size > self.config.segment_bytes - append_size:
            return True
        if self.rolling_base_timestamp is not None and self.rolling_base_timestamp >= 0:
            waited = max_timestamp - self.rolling_base_timestamp
        else:
            waited = now_ms - self.created_ms
        if waited > self.config.segment_ms:
            return True
        return self.offset_index.is_full() or self.time_index.is_full()

    def append(self, data, batches, first_offset=None):
        """Write ``data`` (whole, validated batches) at the end of the .log and index it.

        ``batches`` lists ``(last_offset, max_timestamp, size)`` for each batch in
        ``data``, in order; ``first_offset``: the first batch's base offset, if the
        caller knows it (then ``read`` finds that batch without a lookup).
        Failure-atomic: a failed write raises its OSError (naming the .log) after
        truncating what it wrote, and nothing in memory has changed (LogDirFailureError
        if that truncation fails).
        """
        FILES.touch(self)
        position = self.size
        fd = self.fd
        try:
            written = write_all(fd, data, position)
        except OSError as e:
            e.filename = self.log_path
            self._drop_partial_write(position, e)
            raise
        if first_offset is not None and batches:
            recent = self._recent
            if len(recent) >= _RECENT_APPENDS:
                recent.clear()
            last_offset, batch_max_timestamp, size = batches[0]
            recent[first_offset] = BatchInfo(position, size, first_offset, last_offset,
                                             batch_max_timestamp, None)
        interval = self.config.index_interval_bytes
        offset_index = self.offset_index
        since = self.bytes_since_last_index_entry
        max_timestamp = self.max_timestamp
        for last_offset, batch_max_timestamp, size in batches:
            if batch_max_timestamp > max_timestamp:
                max_timestamp = batch_max_timestamp
                self.offset_of_max_timestamp = last_offset
            if since > interval and not offset_index.is_full():
                offset_index.append(last_offset, position)
                self.time_index.maybe_append(max_timestamp, self.offset_of_max_timestamp,
                                             skip_full_check=True)
                since = 0
            position += size
            since += size
        self.max_timestamp = max_timestamp
        self.bytes_since_last_index_entry = since
        if self.rolling_base_timestamp is None and batches:
            self.rolling_base_timestamp = batches[0][1]
        self.size += written
        self._next_offset = batches[-1][0] + 1 if batches else self._next_offset
        self.unflushed = True

    def _drop_partial_write(self, size, error):
        """Truncate the .log back to ``size`` after the failed write ``error``, so that
        what it wrote is never read, nor found by recovery; LogDirFailureError if even
        that fails."""
        try:
            os.ftruncate(self.fd, size)
        except OSError as undo:
            raise LogDirFailureError(
                f"segment {self.log_path}: a failed write ({describe_os_error(error)}) "
                f"left bytes past position {size} and truncating them failed with "
                f"{describe_os_error(undo)}") from undo

    def flush(self):
        """fsync the .log (if written since the last flush) and both indexes.

        A failed fsync raises LogDirFailureError (``fsync_file``)."""
        if self.unflushed:
            fsync_file(durability.fdatasync, self.fd, self.log_path)
            self.unflushed = False
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def write_indexes(self):
        """Write both indexes' new entries to their files without an fsync (``flush``
        without its fsyncs: the caller syncs the file system)."""
        self.offset_index.write_tail()
        self.time_index.write_tail()

    def seal(self, durable=True):
        """Stop being the active segment: record the largest timestamp in the time index
        and write the indexes out (Kafka's onBecomeInactiveSegment). ``durable`` fsyncs
        the three files; without it the caller arranges that (``sync_files``).

        Failure-atomic: if a write fails (OSError) the segment stays active, its time
        index without the added entry, so sealing it again later redoes it all."""
        entries = self.time_index.entries
        if self.offset_index.mutable:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                         skip_full_check=True)
        try:
            self.offset_index.write_tail()
            self.time_index.write_tail()
            if durable:
                self.flush()
        except OSError:
            self.time_index.truncate_entries(entries)
            raise
        self.txn_index.flush()  # written only by aborts: rarely anything to fsync
        self.offset_index.make_immutable()  # nothing left to write: only releases
        self.time_index.make_immutable()

    def sync_files(self):
        """A function that fsyncs this segment's three files through descriptors of its
        own, so it may run on another thread while the owner goes on (and even closes or
        deletes the segment): Kafka's asynchronous flush of a rolled segment."""
        fds = [os.dup(self.fd)]
        try:
            for path in (self.offset_index.path, self.time_index.path):
                fds.append(os.open(path, os.O_RDONLY))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise

        paths = (self.log_path, self.offset_index.path, self.time_index.path)

        def sync():
            try:
                for fd, path, call in zip(fds, paths, (durability.fdatasync, durability.fsync,
                                                       durability.fsync)):
                    fsync_file(call, fd, path)
            finally:
                for fd in fds:
                    os.close(fd)
        return sync

    def make_active(self):
        """Load the indexes for appending again (after truncating into this segment)."""
        self.offset_index.make_mutable()
        self.time_index.make_mutable()
        self.load_tail_state()

    def truncate_to(self, offset):
        """Drop every batch whose last offset is >= ``offset``; return the bytes dropped.

        The segment becomes mutable (the log makes it the active one).
        """
        first_dropped = self.translate_offset(offset)
        self._recent.clear()
        self.offset_index.make_mutable()
        self.time_index.make_mutable()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        dropped = 0
        if first_dropped is not None:
            dropped = self.size - first_dropped.position
            os.ftruncate(self.fd, first_dropped.position)
            self.size = first_dropped.position
            # the unchecked bytes end here now: what is appended next is validated before
            # it is written, and a first read must not take it for a batch cut short
            self.unverified_end = min(self.unverified_end, self.size)
            self.unflushed = True
        self.load_tail_state()
        return dropped, first_dropped

    # -- recovery -------------------------------------------------------------------------

    def recover(self, from_offset=None, next_base_offset=None, flushed_offset=0):
        """Validate batches, rebuild the indexes on the way and truncate at the first
        invalid batch; return the number of bytes dropped.

        With ``from_offset`` (the log's recovery point: everything below it was flushed),
        the scan resumes after the last offset index entry below it when the indexes are
        sane and that entry points at the batch it names; otherwise it starts at byte 0.
        A batch is invalid if its framing or CRC-32C is wrong, or if its base offset falls
        below the segment's base or the previous batch's next offset, or its last offset
        reaches ``next_base_offset`` (the next segment's base, when there is one):
        baseOffset is outside the CRC, so this is what catches a corrupted one.

        An invalid batch where a batch below ``flushed_offset`` (the log's recovery point)
        should be was written whole and fsynced: a byte changed on disk since, not a torn
        write. Then nothing is truncated: CorruptSegmentError (the log goes offline).
        Above it, an invalid batch whose framing holds (its length fits the file) is
        damage too, not a torn write: ``damaged`` is then set and the whole segment is
        copied to ``<name>.log.damaged`` before the cut (never deleted).
        """
        self.offset_index.make_mutable()
        self.time_index.make_mutable()
        self.damaged = False
        position, since, expected_offset = self._resume_point(from_offset)
        start = position
        if position == 0:
            self.offset_index.reset()
            self.time_index.reset()
            self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        else:
            self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
        interval = self.config.index_interval_bytes
        valid_end = position
        control = False
        # The loop holds the raw descriptor: safe, as nothing in it opens a file (which
        # could make the cache release this one); entries go to the in-memory mirrors.
        for batch_position, view in iter_file_batches(self.fd, position, self.size):
            try:
                header = BatchHeader(view)
                header.validate()
                if header.base_offset < expected_offset:
                    raise CorruptRecordError(
                        f"baseOffset {header.base_offset}, expected at least "
                        f"{expected_offset}")
                if next_base_offset is not None and header.last_offset >= next_base_offset:
                    raise CorruptRecordError(
                        f"last offset {header.last_offset} reaches the next segment's base "
                        f"offset {next_base_offset}")
                if header.last_offset - self.base_offset > xd.MAX_RELATIVE_OFFSET:
                    raise CorruptRecordError(
                        f"last offset {header.last_offset} does not fit the index of a "
                        f"segment based at {self.base_offset}")
            except CorruptRecordError as e:
                if expected_offset < flushed_offset:
                    raise CorruptSegmentError(
                        f"segment {self.log_path}: batch at position {batch_position} "
                        f"(offset {expected_offset} expected next, below the recovery "
                        f"point {flushed_offset}): {_without_position(e)}") from e
                log.warning("segment %s: invalid batch at position %d: %s", self.log_path,
                            batch_position, e)
                # framed whole but failing its checks: damage, not a torn write
                self.damaged = len(view) >= bd.LOG_OVERHEAD and len(view) == (
                    bd.LOG_OVERHEAD + bd.INT32.unpack_from(view, bd.BATCH_LENGTH_OFFSET)[0])
                break
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            if since > interval and not self.offset_index.is_full():
                self.offset_index.append(header.last_offset, batch_position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                             skip_full_check=True)
                since = 0
            size = header.size_in_bytes
            since += size
            control = control or header.is_control_batch
            valid_end = batch_position + size
            expected_offset = header.next_offset
        dropped = self.size - valid_end
        self._recent.clear()
        if dropped and self.damaged:
            aside = free_damaged_name(self.log_path)
            shutil.copyfile(self.log_path, aside)
            log.warning("segment %s: damaged batches at position %d; the whole segment is "
                        "kept in %s before the log is cut there", self.log_path, valid_end,
                        aside)
        #: Where the batches dropped seemed to end (their headers, unchecked: a lower
        #: bound on the log end before recovery), or the offset expected next.
        self.dropped_end_offset = expected_offset
        if dropped:
            self.dropped_end_offset = self._claimed_end(valid_end, expected_offset)
            log.warning("segment %s: truncated %d invalid bytes at position %d",
                        self.log_path, dropped, valid_end)
            os.ftruncate(self.fd, valid_end)
            self.size = valid_end
        self.unflushed = True
        self.unverified_end = start  # the batches from there on were just checked
        self.recovered_control_batch = control
        self.load_tail_state()
        return dropped

    def _claimed_end(self, position, expected_offset):
        """The offset after the last batch from ``position`` on whose framing holds and
        whose offsets follow the previous ones (headers only, no CRC: what the dropped
        bytes claimed to hold)."""
        end = expected_offset
        try:
            for _, view in iter_file_batches(self.fd, position, self.size):
                if len(view) < bd.RECORDS_OFFSET:
                    break
                header = BatchHeader(view)
                if header.base_offset < end or header.last_offset < header.base_offset:
                    continue  # a damaged baseOffset: skip this batch
                end = header.next_offset
        except (CorruptRecordError, KafkaStorageError):
            pass
        return end

    def _resume_point(self, from_offset):
        """``(position, bytes_since_last_entry, next_expected_offset)`` to resume at."""
        if from_offset is None or from_offset <= self.base_offset:
            return 0, 0, self.base_offset
        try:
            self.sanity_check()
        except CorruptIndexError as e:
            log.warning("segment %s: rebuilding indexes: %s", self.log_path, e)
            return 0, 0, self.base_offset
        n = self.offset_index.search(0, from_offset - 1 - self.base_offset)
        if n < 0:
            return 0, 0, self.base_offset
        relative, position = self.offset_index.entry(n)
        data = os.pread(self.fd, bd.HEADER_SIZE, position)
        if len(data) < bd.HEADER_SIZE:
            return 0, 0, self.base_offset
        fields = bd.HEADER.unpack_from(data)
        size = bd.LOG_OVERHEAD + fields[1]
        if (fields[3] != bd.MAGIC or fields[0] + fields[6] != self.base_offset + relative
                or position + size > self.size):
            log.warning("segment %s: index entry %d (offset %d, position %d) does not name "
                        "the batch there; rebuilding", self.log_path, n,
                        self.base_offset + relative, position)
            return 0, 0, self.base_offset
        last_offset = self.base_offset + relative
        self.offset_index.truncate_entries(n + 1)
        self.time_index.truncate_to(last_offset + 1)
        return position + size, size, last_offset + 1

    # -- files ----------------------------------------------------------------------------

    def rename_suffix(self, new_suffix):
        """Rename the three files from this segment's suffix to ``new_suffix`` (log last)."""
        new_log, new_index, new_time_index = segment_paths(self.directory, self.base_offset,
                                                           new_suffix)
        self.offset_index.rename(new_index)
        self.time_index.rename(new_time_index)
        self.txn_index.rename(txn_index_path(self.directory, self.base_offset, new_suffix))
        os.rename(self.log_path, new_log)
        self.log_path = new_log
        self.suffix = new_suffix

    def close(self):
        """Write out the indexes and close the files; safe to call twice."""
        if self._closed:
            return
        self.offset_index.close()
        self.time_index.close()
        self._end()

    def abandon(self):
        """Close the files without writing anything, not even the pending index entries
        (the files now belong to another writer, whose recovery rebuilds what it needs);
        safe to call twice."""
        if not self._closed:
            self._end()

    def _end(self):
        """Close the files for good: ``fd`` raises from now on."""
        self._closed = True
        FILES.forget(self)
        self.release_files()

    def delete(self):
        """Close and unlink the three files; safe to call twice."""
        self._end()
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        try:
            os.unlink(self.log_path)
        except FileNotFoundError:
            pass

    def set_aside(self):
        """Close the segment and rename its .log to a ``.damaged`` name (its indexes are
        derived data and go); return the new path."""
        self._end()
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        aside = free_damaged_name(self.log_path)
        os.rename(self.log_path, aside)
        return aside

    def discard(self):
        """Undo ``create`` (the roll it was for failed): close and remove the files;
        LogDirFailureError if one stays."""
        self.close()
        self._unlink_files()

    def _unlink_files(self):
        """Remove whatever files a failed ``create`` made; LogDirFailureError if one
        stays (a later roll to this base offset could not create it again)."""
        for path in (*segment_paths(self.directory, self.base_offset, self.suffix),
                     self.txn_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise LogDirFailureError(f"segment {path}: removing it after a failed "
                                         f"creation failed with {describe_os_error(e)}") from e

    def __repr__(self):
        return (f"Segment(base_offset={self.base_offset}, size={self.size}, "
                f"suffix={self.suffix!r})")


def _without_position(error):
    """A batch header's message without its "batch at position 0: " prefix (the header
    was read from a view starting at the batch)."""
    message = error.args[0] if error.args else str(error)
    prefix = "batch at position 0: "
    return message[len(prefix):] if message.startswith(prefix) else message


def write_all(fd, data, position):
    """pwrite ``data`` (bytes-like, or a list of them written back to back with pwritev)
    at ``position``, looping over short writes; returns the bytes."""
    if data.__class__ is list:
        return _write_pieces(fd, data, position)
    total = len(data)
    written = os.pwrite(fd, data, position)
    if written < total:
        with memoryview(data) as view:
            while written < total:
                written += os.pwrite(fd, view[written:], position + written)
    return total


def _write_pieces(fd, pieces, position):
    """write_all of a list of buffers: pwritev of at most IOV_MAX at a time, a short write
    resumed where it stopped."""
    views = [memoryview(piece) for piece in pieces if len(piece)]
    total = sum(map(len, views))
    written = 0
    while views:
        done = os.pwritev(fd, views[:_IOV_MAX], position + written)
        written += done
        while views and done >= len(views[0]):
            done -= len(views[0])
            views.pop(0)
        if done:
            views[0] = views[0][done:]
    return total


def read_into(fd, buf, position):
    """Fill ``buf`` from ``position``, looping over short reads; raises at end of file."""
    total = len(buf)
    done = os.preadv(fd, [buf], position)
    while done < total:
        got = os.preadv(fd, [buf[done:]], position + done)
        if got <= 0:
            raise KafkaStorageError(f"end of file after {done} of {total} bytes at position "
                                    f"{position}")
        done += got
    return total
