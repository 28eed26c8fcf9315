"""The fetch purgatory: Fetch requests that wait for data (Kafka's DelayedFetch).

A Fetch that finds fewer than ``min_bytes`` readable, has no error and a ``max_wait`` > 0
is parked here instead of answered. It leaves when one of these happens, whichever comes
first (Kafka's rules):

- the bytes that became readable to it in its partitions since it was parked, plus what it
  found at first, reach ``min_bytes`` — so ``min_bytes`` = 1 completes on the first. What
  is readable differs by reader (Kafka's FetchIsolation): a follower's fetch
  (``replica_id`` >= 0) reads to the log end, so appends wake it (``on_append``); a
  read_uncommitted consumer's reads below the high watermark, so high-watermark advances
  wake it (``on_high_watermark``: with replication the high watermark moves when
  followers fetch, not when the leader appends); a read_committed consumer's reads below
  the last stable offset, so only its advances wake it (``on_stable_offset``): records
  appended after an open transaction do not, the marker that ends it (once below the
  high watermark) does. The LSO moves only when the high watermark does, so the caller
  measures it then, from the LSO the purgatory last saw for the partition
  (``stable_offset``: the one at park time, kept while a read_committed fetch watches);
- something about one of its partitions changed — leader, epoch, deletion
  (``on_change``);
- its ``max_wait`` runs out (``expire``).

The purgatory only decides *when*; the caller then reads the logs again and answers, so a
parked fetch holds no LogSlice (segments may be deleted meanwhile) and the answer carries
everything appended up to that moment. ``context`` is the caller's (the request and its
connection). Times are the caller's monotonic clock in seconds, passed in.

Owner: the broker's loop thread, the only caller. Not thread-safe.
"""
from __future__ import annotations

import heapq
import itertools

#: Who reads what (Kafka's FetchIsolation): to the log end, the HW, or the LSO.
FOLLOWER, HIGH_WATERMARK, STABLE = "follower", "high watermark", "stable"


class DelayedFetch:
    """One parked Fetch: its deadline, the bytes it needs and has, its partitions, how far
    it may read (``isolation``: FOLLOWER, HIGH_WATERMARK or STABLE)."""

    __slots__ = ("deadline", "min_bytes", "accumulated", "keys", "context", "isolation",
                 "done")

    def __init__(self, deadline, min_bytes, accumulated, keys, context,
                 isolation=HIGH_WATERMARK):
        self.deadline = deadline
        self.isolation = isolation
        self.min_bytes = min_bytes
        self.accumulated = accumulated
        self.keys = tuple(keys)
        self.context = context
        self.done = False

    def __repr__(self):
        return (f"DelayedFetch(deadline={self.deadline:.3f}, {self.accumulated}/"
                f"{self.min_bytes} bytes, {len(self.keys)} partition(s))")


class FetchPurgatory:
    """Parked fetches by watched partition and by deadline (see the module doc)."""

    def __init__(self):
        self._watchers = {}  # (topic, index) -> [DelayedFetch]: every parked fetch's
        # (topic, index) -> [DelayedFetch], by isolation: followers' (woken by appends),
        # read_uncommitted consumers' (by the HW), read_committed consumers' (by the LSO)
        self._by_isolation = {FOLLOWER: {}, HIGH_WATERMARK: {}, STABLE: {}}
        self._consumers = self._by_isolation[HIGH_WATERMARK]
        self._stable = {}  # (topic, index) -> the LSO last seen, while a STABLE fetch waits
        self._deadlines = []  # heap of (deadline, sequence, DelayedFetch)
        self._sequence = itertools.count()
        self._count = 0

    def __len__(self):
        return self._count

    def park(self, fetch, stable_offsets=None):
        """Watch ``fetch`` until it completes, expires or is cancelled. A read_committed
        fetch gives ``stable_offsets``: key -> the LSO its read stopped at."""
        by_reader = self._by_isolation[fetch.isolation]
        for key in fetch.keys:
            self._watchers.setdefault(key, []).append(fetch)
            by_reader.setdefault(key, []).append(fetch)
            if fetch.isolation == STABLE:
                self._stable.setdefault(key, stable_offsets[key])
        heapq.heappush(self._deadlines, (fetch.deadline, next(self._sequence), fetch))
        self._count += 1

    def on_append(self, key, size):
        """``size`` bytes were appended to partition ``key``: the followers' fetches that
        now have their ``min_bytes`` (removed from the purgatory)."""
        return self._readable(self._by_isolation[FOLLOWER].get(key), size)

    def on_high_watermark(self, key, size):
        """``size`` bytes of partition ``key`` came below its high watermark: the
        read_uncommitted consumers' fetches that now have their ``min_bytes`` (removed
        from the purgatory)."""
        return self._readable(self._consumers.get(key), size)

    def has_consumers(self, key):
        """Whether a consumer's fetch (either isolation) watches ``key``: the one check a
        high-watermark move pays when none does."""
        return key in self._consumers or key in self._stable

    def has_uncommitted_consumers(self, key):
        """Whether a read_uncommitted consumer's fetch watches ``key`` (before measuring
        what it may read)."""
        return key in self._consumers

    def stable_offset(self, key):
        """The LSO of ``key`` last seen while a read_committed fetch watches it, else
        None."""
        return self._stable.get(key)

    def on_stable_offset(self, key, stable_offset, size):
        """The LSO of partition ``key`` moved up to ``stable_offset``, bringing ``size``
        bytes below it: the read_committed fetches that now have their ``min_bytes``
        (removed from the purgatory)."""
        if key in self._stable:
            self._stable[key] = stable_offset
        return self._readable(self._by_isolation[STABLE].get(key), size)

    def _readable(self, watchers, size):
        if not watchers:
            return []
        ready = []
        for fetch in watchers:
            fetch.accumulated += size
            if fetch.accumulated >= fetch.min_bytes:
                ready.append(fetch)
        for fetch in ready:
            self._finish(fetch)
        return ready

    def on_change(self, keys):
        """The fetches watching any partition in ``keys`` (removed from the purgatory)."""
        ready = []
        for key in keys:
            for fetch in self._watchers.get(key, ()):
                if not fetch.done:
                    ready.append(fetch)
                    fetch.done = True  # listed once even if it watches several keys
        for fetch in ready:
            fetch.done = False
            self._finish(fetch)
        return ready

    def expire(self, now):
        """The fetches whose deadline is <= ``now`` (removed from the purgatory)."""
        due = []
        heap = self._deadlines
        while heap and (heap[0][2].done or heap[0][0] <= now):
            _, _, fetch = heapq.heappop(heap)
            if not fetch.done:
                self._finish(fetch)
                due.append(fetch)
        return due

    def cancel(self, fetch):
        """Forget ``fetch`` (its client went away). Safe for one already gone."""
        if not fetch.done:
            self._finish(fetch)

    def next_deadline(self):
        """The earliest deadline of a parked fetch, or None."""
        heap = self._deadlines
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _finish(self, fetch):
        fetch.done = True
        self._count -= 1
        by_reader = self._by_isolation[fetch.isolation]
        for key in fetch.keys:
            for index in (self._watchers, by_reader):
                watchers = index.get(key)
                if watchers is not None:
                    watchers.remove(fetch)
                    if not watchers:
                        del index[key]
            if fetch.isolation == STABLE and key not in by_reader:
                del self._stable[key]
