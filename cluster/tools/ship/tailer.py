"""Which files the shipper reads, in which order, and from which position.

``Tailer.scan()`` (every ``--scan-interval``, and once at start) expands the globs and
reconciles what it finds with the files it follows (``Tracked``), by identity (``files``),
never by path:

- a path whose inode the tailer follows is the same file, possibly renamed: it is not read
  again (a rotated copy still matching the glob, ``app.log.1`` for ``app.log*``, is the file
  already followed);
- a file whose path now names another inode, or nothing, is *rotated* (renamed or deleted):
  it is still read through its open handle, and it is finished once it has been at its end
  for ``rotate_wait`` seconds (its last line then ships even without a newline);
- a new file found at the path a rotated, unfinished file had when first seen waits for that
  file to finish (``after``): a renamed file is read to its end before the new one, so a
  source's lines keep their order;
- a followed file smaller than its position, or whose first bytes no longer match its
  fingerprint, was truncated in place (copytruncate): it is a new file from position 0.
  Checked at each scan and before reading on from a file's end, so a file truncated and
  rewritten past the old position between two scans is not read from the middle;
- a new file whose first bytes are those of a followed file, and at least as long, is taken
  for its ``copytruncate`` copy: it waits (up to ``rotate_wait``) for that file's
  truncation, then is read from the position the truncated file had reached (so a copy
  matching the glob is not read twice, and the lines written before the truncation that
  were not read yet are read in the copy), before the file's new content; if no truncation
  comes within ``rotate_wait`` it is a file of its own, read whole;
- a new file is read from the checkpoint's position when the checkpoint knows its identity,
  else from 0, or from its end when ``from_end`` and it was there at the first scan;
- a finished file neither found by the globs nor waiting for acknowledgements is forgotten
  (and leaves the checkpoint).

``Tailer.read(budget)`` reads the next chunk of lines of one file (round robin over the
readable ones) and returns ``(tracked, lines.Cut)``; the caller sends them and moves
``tracked.acked`` as they are acknowledged. With ``once`` every file's end is final: the
tailer reads each to its end and ``finished()`` says when all are.

Owner: the shipper's thread; the clock is injected (tests use a fake one).
"""
from __future__ import annotations

import collections
import logging

from cluster.tools.ship.checkpoint import Entry
from cluster.tools.ship.files import FINGERPRINT_BYTES, file_id, fingerprint
from cluster.tools.ship.lines import SPLIT, cut

log = logging.getLogger(__name__)

#: Bytes read from a file at a time (at least ``max_line_bytes`` + 2, so a read always
#: makes progress).
READ_BYTES = 1 << 20


class Tracked:
    """One file the shipper follows (module doc). ``position``: the next byte to read;
    ``acked``: every line before it is acknowledged (what the checkpoint keeps);
    ``pending``: the shipper's unacknowledged chunks, oldest first."""

    def __init__(self, fid, dev, ino, print_, print_length, origin, handle, position,
                 skipping=False):
        self.id = fid
        self.id_bytes = fid.encode()
        self.dev = dev
        self.ino = ino
        self.fingerprint = print_
        self.fingerprint_length = print_length
        self.origin = origin  # where first seen: the {file} of its keys
        self.path = origin
        self.handle = handle
        self.position = self.acked = position
        self.skipping = self.acked_skipping = skipping
        self.size = position
        self.rotated = False
        self.done = False
        self.replaced = False  # truncated in place: a new Tracked follows the inode
        self.copied = False  # its copytruncate copy is followed from its position
        self.seen = True
        self.idle_since = None
        self.caught_up = False  # the last read reached the end: check truncation first
        self.retry_at = 0.0
        self.after = []
        self.pending = collections.deque()

    def entry(self):
        return Entry(self.id, self.dev, self.ino, self.fingerprint, self.fingerprint_length,
                     self.origin, self.acked, self.acked_skipping)

    def close(self):
        self.done = True
        if self.handle is not None:
            self.handle.close()
            self.handle = None

    def __repr__(self):
        return f"Tracked({self.path!r}, id={self.id}, position={self.position})"


class Tailer:
    """The files of ``patterns`` (globs) on ``files`` (module doc)."""

    def __init__(self, files, patterns, clock, *, restored=None, from_end=False, once=False,
                 rotate_wait=5.0, max_line_bytes=1 << 20, overflow=SPLIT,
                 read_bytes=READ_BYTES):
        self.files = files
        self.patterns = list(patterns)
        self.clock = clock
        self.restored = dict(restored or {})
        self.from_end = from_end
        self.once = once
        self.rotate_wait = rotate_wait
        self.max_line_bytes = max_line_bytes
        self.overflow = overflow
        self.read_bytes = max(read_bytes, max_line_bytes + 2)
        self.tracked = []
        self.truncations = 0
        self.lines_split = 0
        self.lines_truncated = 0
        self._scans = 0
        self._next = 0
        self._held = {}  # (dev, ino) of a copy of a followed file -> when first seen

    # -- discovery -------------------------------------------------------------------------

    def scan(self):
        """Reconcile the globs' files with the followed ones (module doc)."""
        first = self._scans == 0
        self._scans += 1
        for t in self.tracked:
            t.seen = False
            if t.done and not t.pending and t.handle is not None:
                t.handle.close()
                t.handle = None
            if not t.done and not t.rotated:
                st = self.files.stat(t.path)
                if st is None or (st.dev, st.ino) != (t.dev, t.ino):
                    t.rotated = True
        found = {}
        for pattern in self.patterns:
            for path in self.files.glob(pattern):
                if path not in found:
                    st = self.files.stat(path)
                    if st is not None:
                        found[path] = st
        by_inode = {(t.dev, t.ino): t for t in self.tracked if not t.replaced}
        new = []
        for path, st in found.items():
            t = by_inode.get((st.dev, st.ino))
            if t is None:
                if st.size > 0:
                    new.append((path, st))
                continue
            t.seen = True
            t.size = st.size
            if t.path != path:
                t.path = path
                t.rotated = True
            if self._truncated(t, st):
                if st.size > 0:
                    new.append((path, st))
            elif t.done and st.size > t.position and not self.once:
                if t.handle is None:  # written to after it was finished
                    t.handle = self.files.open(path)
                t.done = False
                t.idle_since = None
        truncated_paths = {t.path for t in self.tracked if t.replaced}
        new.sort(key=lambda item: (not self._restorable(*item[1][:2]),
                                   item[0] in truncated_paths))
        for path, st in new:
            self._discover(path, st, first)
        self.tracked = [t for t in self.tracked if not self._forgettable(t)]

    def _restorable(self, dev, ino):
        return any(e.dev == dev and e.ino == ino for e in self.restored.values())

    def _forgettable(self, t):
        if t.pending or not t.done:
            return False
        return t.replaced or (not t.seen and t.acked == t.position)

    def _truncated(self, t, st):
        """Whether ``t`` was truncated in place (copytruncate); if so it is finished and
        marked replaced, so its inode is discovered again as a new file."""
        if t.replaced or t.rotated:
            return False
        shrunk = st.size < t.position
        if not shrunk and t.handle is not None:
            head = t.handle.read_at(0, t.fingerprint_length)
            shrunk = len(head) < t.fingerprint_length or fingerprint(head) != t.fingerprint
        if shrunk:
            log.warning("%s was truncated (size %d, position %d): reading it again from "
                        "position 0", t.path, st.size, t.position)
            self.truncations += 1
            t.replaced = True
            t.close()
        return shrunk

    def _discover(self, path, st, first):
        try:
            handle = self.files.open(path)
        except OSError:  # gone between glob and open: the next scan tells
            return
        hst = handle.stat()
        head = handle.read_at(0, FINGERPRINT_BYTES)
        if (hst.dev, hst.ino) != (st.dev, st.ino) or not head:
            handle.close()
            return
        entry = self._restore(hst.dev, hst.ino, head)
        if entry is None and first:
            entry = self._restore_copy(head, hst.size)
        source = None if first or entry is not None else self._copied_from(head, hst.size)
        if source is not None and not source.replaced:
            since = self._held.setdefault((hst.dev, hst.ino), self.clock())
            if self.clock() - since < self.rotate_wait:
                handle.close()  # a copy of a followed file: wait for its truncation
                return
            source = None  # not truncated: a file of its own, read whole
        self._held.pop((hst.dev, hst.ino), None)
        if entry is not None and entry.id is None:  # a copy found at start (_restore_copy)
            print_ = fingerprint(head)
            t = Tracked(file_id(hst.dev, hst.ino, print_), hst.dev, hst.ino, print_,
                        len(head), entry.path, handle, entry.position, entry.skipping)
            for newer in self.tracked:  # the truncated file's new lines come after
                if (newer.dev, newer.ino) == (entry.dev, entry.ino):
                    newer.after.append(t)
        elif source is not None:  # the copy of a file truncated in place: go on in the copy
            print_ = fingerprint(head)
            t = Tracked(file_id(hst.dev, hst.ino, print_), hst.dev, hst.ino, print_,
                        len(head), source.origin, handle, source.position, source.skipping)
            log.warning("%s is the copy of %s made before its truncation: reading on in the "
                        "copy from position %d", path, source.origin, source.position)
            source.copied = True
        elif entry is not None and hst.size >= entry.position:
            t = Tracked(entry.id, entry.dev, entry.ino, entry.fingerprint,
                        entry.fingerprint_length, entry.path, handle, entry.position,
                        entry.skipping)
        else:
            if entry is not None:
                log.warning("%s is smaller (%d bytes) than its checkpointed position %d: "
                            "truncated, reading it from position 0", path, hst.size,
                            entry.position)
                self.truncations += 1
            print_ = fingerprint(head)
            position = hst.size if first and self.from_end and entry is None else 0
            t = Tracked(file_id(hst.dev, hst.ino, print_), hst.dev, hst.ino, print_,
                        len(head), path, handle, position)
        t.path = path
        t.rotated = t.origin != path
        t.size = hst.size
        t.after = [o for o in self.tracked
                   if o.origin == t.origin and not o.done and t not in o.after]
        self.tracked.append(t)

    def _copied_from(self, head, size):
        """The followed file whose copy (``copytruncate``) a new file with ``head`` and
        ``size`` may be: same first bytes, at least as long, not copied already; a
        truncated one first."""
        candidates = [t for t in self.tracked
                      if not t.rotated and not t.copied and t.fingerprint_length <= len(head)
                      and size >= t.position
                      and fingerprint(head[:t.fingerprint_length]) == t.fingerprint]
        candidates.sort(key=lambda t: not t.replaced)
        return candidates[0] if candidates else None

    def _restore_copy(self, head, size):
        """At start: the checkpoint's entry of a file truncated in place (copytruncate) while
        the shipper was down, whose copy has ``head`` and ``size``: the copy goes on from
        the entry's position (the truncated inode, discovered first, no longer matched)."""
        for fid, e in self.restored.items():
            if (len(head) >= e.fingerprint_length and size >= e.position
                    and fingerprint(head[:e.fingerprint_length]) == e.fingerprint
                    and any((t.dev, t.ino) == (e.dev, e.ino) for t in self.tracked)):
                del self.restored[fid]
                log.warning("a copy of %s made before its truncation: reading on in it from "
                            "position %d", e.path, e.position)
                return e._replace(id=None)
        return None

    def _restore(self, dev, ino, head):
        for fid, e in self.restored.items():
            if (e.dev == dev and e.ino == ino and len(head) >= e.fingerprint_length
                    and fingerprint(head[:e.fingerprint_length]) == e.fingerprint):
                del self.restored[fid]
                return e
        return None

    # -- reading ---------------------------------------------------------------------------

    def readable(self, t, now):
        return (not t.done and now >= t.retry_at and all(o.done for o in t.after))

    def read(self, budget):
        """The next lines of one readable file: ``(tracked, Cut)``, or None when no file has
        new lines. Reads at most max(``budget``, a line) bytes."""
        now = self.clock()
        count = len(self.tracked)
        for step in range(count):
            t = self.tracked[(self._next + step) % count]
            if not self.readable(t, now):
                continue
            result = self._read(t, budget, now)
            if result is not None:
                self._next = (self._next + step + 1) % max(count, 1)
                return t, result
        return None

    def _read(self, t, budget, now):
        if t.caught_up and self._truncated(t, t.handle.stat()):
            return None  # the next scan finds the inode again, as a new file
        size = max(min(budget, self.read_bytes), self.max_line_bytes + 2)
        data = t.handle.read_at(t.position, size)
        at_end = len(data) < size
        t.caught_up = at_end
        final = at_end and (self.once or self._finished_rotating(t, now))
        c = cut(data, t.position, self.max_line_bytes, self.overflow, final, t.skipping)
        t.position += c.consumed
        t.skipping = c.skipping
        self.lines_split += c.split
        self.lines_truncated += c.truncated
        if final and c.consumed == len(data):
            t.done = True  # its handle stays open until its lines are acknowledged
        if c.consumed:
            t.idle_since = None
            return c
        if t.idle_since is None:
            t.idle_since = now
        return None

    def _finished_rotating(self, t, now):
        if not t.rotated:
            return False
        return t.idle_since is not None and now - t.idle_since >= self.rotate_wait

    def finished(self):
        """Whether every followed file is finished (``once``: read to its end)."""
        return all(t.done for t in self.tracked)

    def entries(self):
        """The checkpoint's entries: every followed file's acknowledged position."""
        return [t.entry() for t in self.tracked if not t.replaced]

    def close(self):
        for t in self.tracked:
            if t.handle is not None:
                t.handle.close()
                t.handle = None
