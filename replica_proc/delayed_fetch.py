"""The fetch purgatory: Fetch requests that wait for data (Kafka's DelayedFetch).

A Fetch that finds fewer than ``min_bytes`` below the high watermark, has no error and a
``max_wait`` > 0 is parked here instead of answered. It leaves when one of these happens,
whichever comes first (Kafka's rules):

- the bytes appended to its partitions since it was parked, plus what it found at first,
  reach ``min_bytes`` (``on_append``, called after every append that moved a high
  watermark — so ``min_bytes`` = 1 completes on the first append to any watched
  partition);
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


class DelayedFetch:
    """One parked Fetch: its deadline, the bytes it needs and has, its partitions."""

    __slots__ = ("deadline", "min_bytes", "accumulated", "keys", "context", "done")

    def __init__(self, deadline, min_bytes, accumulated, keys, context):
        self.deadline = deadline
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
        self._watchers = {}  # (topic, index) -> [DelayedFetch]
        self._deadlines = []  # heap of (deadline, sequence, DelayedFetch)
        self._sequence = itertools.count()
        self._count = 0

    def __len__(self):
        return self._count

    def park(self, fetch):
        """Watch ``fetch`` until it completes, expires or is cancelled."""
        for key in fetch.keys:
            self._watchers.setdefault(key, []).append(fetch)
        heapq.heappush(self._deadlines, (fetch.deadline, next(self._sequence), fetch))
        self._count += 1

    def on_append(self, key, size):
        """``size`` bytes became readable in partition ``key``: the fetches that now have
        their ``min_bytes`` (removed from the purgatory)."""
        watchers = self._watchers.get(key)
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
        for key in fetch.keys:
            watchers = self._watchers.get(key)
            if watchers is not None:
                watchers.remove(fetch)
                if not watchers:
                    del self._watchers[key]
