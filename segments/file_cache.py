"""The process's bound on open segment files: an LRU cache of segments whose files are open.

A broker hosts thousands of partitions, each with one or more segments of three files
(``.log``, ``.index``, ``.timeindex``). Keeping them all open costs three descriptors per
segment and runs into RLIMIT_NOFILE ("Too many open files") long before memory or disk
run out. So a segment opens its files on use and registers here (``opened``); when more
than ``max_open_files`` files may be open, the least recently used segments release
theirs (``Segment.release_files``: the .log descriptor, the mutable index's descriptor
or the sealed index's read-only map, whose Python ``mmap`` holds a descriptor of its own).
A released segment keeps everything it knows in memory (sizes, index entries not yet
written) and reopens its files the next time it needs one. Sealed segments of idle
partitions and the active segments of idle partitions therefore hold no descriptor.

Accounting is per segment, at its most: each one counts as ``FILES_PER_SEGMENT`` files,
so at most ``max_open_files // FILES_PER_SEGMENT`` segments are kept open (at least one).

Recency: a segment is moved to the most recently used end once per request that uses it
(``touch`` from ``Segment.append`` and ``Segment.read``: an ``OrderedDict.move_to_end``),
and whenever it reopens a file; nothing is done per record or per batch.

Pins: a caller that holds a segment's raw descriptor across other work that may open files
(a scan of a whole segment while the cleaner writes a new one) pins it (``Segment.pinned``);
eviction skips pinned segments, so the cache may briefly hold more than its bound rather
than close a descriptor someone reads from (a reused descriptor number would read another
file). ``LogSlice`` does not pin: it asks its segment for the descriptor when it reads,
which reopens the file if it was released.

Durability across a release: closing a descriptor after writes does not lose them (they
are in the page cache, per file), and the next ``fdatasync`` on a reopened descriptor
flushes them; a writeback error no one has seen is reported to it (Linux >= 4.16 errseq).

Owner: the process — a broker is one process, and all its logs belong to its loop thread,
the only caller; there is no lock. The flusher thread fsyncs rolled segments through
descriptors it dups for itself (``Segment.sync_files``), which the cache does not count
(three for each of at most ``segments.log.MAX_BACKGROUND_SYNCS`` waiting fsyncs).
``FILES`` is the one instance; the broker sizes it from ``ringlog.max.open.segment.files``.
"""
from __future__ import annotations

import resource
from collections import OrderedDict

#: The files a segment may hold open at once: its .log and its two indexes.
FILES_PER_SEGMENT = 3
#: The largest limit reported (Kafka's int configs stop there).
_INT_MAX = 2**31 - 1


def open_files_limit():
    """This process's RLIMIT_NOFILE soft limit (2**31 - 1 when unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return _INT_MAX if soft == resource.RLIM_INFINITY else min(soft, _INT_MAX)


def default_max_open_files():
    """Half the RLIMIT_NOFILE soft limit: the other half is left to rings, shared memory,
    checkpoints, the metadata log and the flusher's own descriptors."""
    return max(FILES_PER_SEGMENT, open_files_limit() // 2)


class FileCache:
    """The LRU of segments with open files (see the module doc). Single thread: the owner
    of the process's logs."""

    def __init__(self, max_open_files):
        self._open = OrderedDict()  # segment -> None, least recently used first
        self.max_open_files = max_open_files

    @property
    def max_open_files(self):
        return self._max_segments * FILES_PER_SEGMENT

    @max_open_files.setter
    def max_open_files(self, value):
        """Resize; releases the least recently used segments beyond the new bound."""
        if value < 1:
            raise ValueError(f"max_open_files {value} must be at least 1")
        self._max_segments = max(1, value // FILES_PER_SEGMENT)
        self._evict()

    def __len__(self):
        """The segments whose files may be open."""
        return len(self._open)

    def __contains__(self, segment):
        return segment in self._open

    def opened(self, segment):
        """``segment`` opened a file: make it the most recently used, and release the least
        recently used unpinned others beyond the bound."""
        if segment in self._open:
            self._open.move_to_end(segment)
            return
        self._open[segment] = None
        self._evict(keep=segment)

    def touch(self, segment):
        """``segment`` serves a request: the most recently used, if its files are open."""
        try:
            self._open.move_to_end(segment)
        except KeyError:  # released: its next open registers it
            pass

    def forget(self, segment):
        """``segment`` closed its files itself (closed or deleted)."""
        self._open.pop(segment, None)

    def _evict(self, keep=None):
        excess = len(self._open) - self._max_segments
        if excess <= 0:
            return
        victims = []
        for segment in self._open:
            if len(victims) == excess:
                break
            if not segment.pins and segment is not keep:
                victims.append(segment)
        for segment in victims:
            del self._open[segment]
            segment.release_files()


#: The process's cache (a broker process resizes it at start-up).
FILES = FileCache(default_max_open_files())
