"""The transaction index of a segment, ``<base offset>.txnindex``: its aborted transactions.

One ``AbortedTxn`` per ABORT marker appended to the segment (layout:
``txn_index_descriptor``): the producer id, the offsets of the transaction's first
record and of its marker, and the last stable offset once the marker was appended. A
read_committed fetch asks the log for the entries that overlap the range it returns
(``collect``), and the consumer drops those transactions' records.

As Kafka's TransactionIndex: the file is created by the first append and not
preallocated; entries must come in increasing ``last_offset`` order (ValueError
otherwise: the caller's bug, not a disk's); truncation drops the entries whose marker
is at or past the offset; the file is never checksummed. Unlike Kafka's, the parse is
strict: ``sanity_check`` rejects a length that is not a whole number of entries, an
unknown version, a negative producer id, offsets outside the segment or out of order,
and the log then rebuilds the index from the batches (``txn_index_rebuild``) — it is
derived data, so a bad one costs a rescan, never a record. A flipped byte that keeps
every rule (another producer id, first offset or LSO) passes that parse: the log
therefore compares each index it did not write with the segment's ABORT markers at its
first use in a process (``verified``; ``txn_index_rebuild.verify_txn_index``).

The entries are kept in memory once read (aborts are rare: a segment holds few) and
the file is opened for each write (no descriptor held between them).

Thread safety: none. A TransactionIndex belongs to its ``Segment``, which belongs to
the ``PartitionLog``'s single owning thread.
"""
from __future__ import annotations

import os
from collections import namedtuple

from segments import durability, txn_index_descriptor as d
from segments.index import CorruptIndexError, fsync_file

TXN_INDEX_SUFFIX = ".txnindex"

#: One aborted transaction (Kafka's AbortedTxn): ``last_offset`` is its ABORT marker's
#: offset, ``last_stable_offset`` the partition's LSO once that marker was appended.
AbortedTxn = namedtuple("AbortedTxn",
                        "producer_id first_offset last_offset last_stable_offset")


def encode_entry(txn):
    """The 34 bytes of ``txn`` (an AbortedTxn) in the index."""
    return d.ENTRY.pack(d.CURRENT_VERSION, *txn)


def parse_entries(data, base_offset, path="<txnindex>", next_base_offset=None):
    """The AbortedTxns in ``data`` (a whole .txnindex file of the segment based at
    ``base_offset``); CorruptIndexError naming ``path``, the entry and the rule it breaks
    (module doc)."""
    if len(data) % d.ENTRY_SIZE:
        raise CorruptIndexError(
            f"transaction index {path}: {len(data)} bytes is not a whole number of "
            f"{d.ENTRY_SIZE}-byte entries")
    out = []
    previous = None
    for n, (version, producer_id, first, last, lso) in enumerate(d.ENTRY.iter_unpack(data)):
        problem = None
        if version != d.CURRENT_VERSION:
            problem = f"version {version}, expected {d.CURRENT_VERSION}"
        elif producer_id < 0:
            problem = f"producer id {producer_id} is negative"
        elif last < base_offset:
            problem = f"last offset {last} is below the segment's base offset {base_offset}"
        elif next_base_offset is not None and last >= next_base_offset:
            problem = (f"last offset {last} reaches the next segment's base offset "
                       f"{next_base_offset}")
        elif not 0 <= first <= last:
            problem = f"first offset {first} is not between 0 and the last offset {last}"
        elif not 0 <= lso <= last + 1:
            problem = f"last stable offset {lso} is not between 0 and {last + 1}"
        elif previous is not None and last <= previous:
            problem = (f"last offset {last} is not greater than the previous entry's "
                       f"{previous}")
        if problem is not None:
            raise CorruptIndexError(f"transaction index {path}: entry {n} (at byte "
                                    f"{n * d.ENTRY_SIZE}): {problem}")
        out.append(AbortedTxn(producer_id, first, last, lso))
        previous = last
    return out


class TransactionIndex:
    """The aborted transactions of the segment based at ``base_offset``, kept in the file
    ``path`` (module doc)."""

    def __init__(self, path, base_offset, verified=False):
        self.path = os.fspath(path)
        self.base_offset = base_offset
        self._entries = None  # read from the file on first use
        self.unflushed = False
        #: Whether the entries were checked against the segment's batches in this
        #: process, or written by it (a new segment's): see the log's "Transaction index".
        self.verified = verified

    @property
    def file_exists(self):
        return os.path.exists(self.path)

    def entries(self):
        """Every AbortedTxn in the index, in order (read and parsed strictly the first
        time: CorruptIndexError)."""
        if self._entries is None:
            self._entries = self._load()
        return self._entries

    def _load(self, next_base_offset=None):
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        return parse_entries(data, self.base_offset, self.path, next_base_offset)

    def sanity_check(self, next_base_offset=None):
        """Parse the file (again) strictly; CorruptIndexError if it breaks a rule."""
        self._entries = None
        self._entries = self._load(next_base_offset)

    @property
    def last_offset(self):
        """The last offset of the last entry, or None when there is none."""
        entries = self.entries()
        return entries[-1].last_offset if entries else None

    def append(self, txn):
        """Add ``txn`` (an AbortedTxn) at the end; ValueError unless its last offset is
        greater than the last entry's and within the segment. OSError if the write fails
        (then the file and the entries are as before)."""
        entries = self.entries()
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"transaction index {self.path}: the last offset of appended transactions "
                f"must increase, but {txn.last_offset} is not greater than "
                f"{entries[-1].last_offset}")
        if txn.last_offset < self.base_offset or txn.first_offset > txn.last_offset:
            raise ValueError(f"transaction index {self.path}: {txn} does not end in the "
                             f"segment based at {self.base_offset}")
        data = encode_entry(txn)
        size = len(entries) * d.ENTRY_SIZE
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            try:
                written = os.pwrite(fd, data, size)
                if written != len(data):
                    raise OSError(f"short write of {written} of {len(data)} bytes")
            except OSError:
                os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
        entries.append(AbortedTxn(*txn))
        self.unflushed = True

    def collect(self, fetch_offset, upper_bound_offset):
        """``(aborted, complete)``: the entries that overlap the range [fetch_offset,
        upper_bound_offset) — their marker at or after ``fetch_offset`` and their first
        offset before ``upper_bound_offset`` — and whether the search may stop here (an
        entry's LSO reached ``upper_bound_offset``: Kafka's collectAbortedTxns)."""
        aborted = []
        for txn in self.entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                aborted.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return aborted, True
        return aborted, False

    def truncate_to(self, offset):
        """Drop the entries whose last offset is >= ``offset``."""
        entries = self.entries()
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(entries):
            return
        if keep == 0:
            self.delete()
            return
        os.truncate(self.path, keep * d.ENTRY_SIZE)
        del entries[keep:]
        self.unflushed = True

    def reset(self):
        """Remove every entry (and the file)."""
        self.delete()

    def flush(self):
        """fsync the file if it was written since the last flush (LogDirFailureError if
        the fsync fails)."""
        if not self.unflushed:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:  # emptied since: nothing to make durable
            self.unflushed = False
            return
        try:
            fsync_file(durability.fsync, fd, self.path)
        finally:
            os.close(fd)
        self.unflushed = False

    def rename(self, new_path):
        """Move the file (if there is one) to ``new_path``."""
        if os.path.exists(self.path):
            os.rename(self.path, new_path)
        self.path = os.fspath(new_path)

    def delete(self):
        """Remove the file; the index is then empty. Safe to call twice."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._entries = []
        self.unflushed = False

    def __repr__(self):
        return f"TransactionIndex({self.path!r}, base_offset={self.base_offset})"
