"""The group coordinator's timers: one deadline per key, in a heap validated lazily.

Kafka keeps a purgatory per kind of wait (rebalances, heartbeats); here every wait of the
coordinator is a key (a tuple naming the kind, the group and, where it applies, the member)
with at most one deadline. ``set`` replaces a key's deadline and ``cancel`` forgets it,
both in O(log n) / O(1): the heap keeps the superseded entries and ``due`` /
``next_deadline`` drop them when they reach the top (an entry is current while its
sequence number is the key's). Times are the caller's monotonic seconds.

Owner: the group coordinator (the broker loop thread). Not thread-safe.
"""
from __future__ import annotations

import heapq
import itertools


class Timers:
    """Deadlines by key (see the module doc)."""

    def __init__(self):
        self._current = {}  # key -> (deadline, sequence) of its live entry
        self._heap = []  # (deadline, sequence, key), superseded entries included
        self._sequence = itertools.count()

    def __len__(self):
        return len(self._current)

    def __contains__(self, key):
        return key in self._current

    def set(self, key, deadline):
        """Fire ``key`` at ``deadline`` (replacing any deadline it had)."""
        entry = (deadline, next(self._sequence))
        self._current[key] = entry
        heapq.heappush(self._heap, (*entry, key))

    def cancel(self, key):
        """Forget ``key``'s deadline; a key without one is ignored."""
        self._current.pop(key, None)

    def deadline(self, key):
        """``key``'s deadline, or None."""
        entry = self._current.get(key)
        return entry[0] if entry is not None else None

    def pop_due(self, now):
        """The next key whose deadline is <= ``now`` (forgotten), or None. One at a time, so
        the caller may set and cancel keys between two calls."""
        heap = self._heap
        while heap:
            deadline, sequence, key = heap[0]
            if self._current.get(key) != (deadline, sequence):
                heapq.heappop(heap)
                continue
            if deadline > now:
                return None
            heapq.heappop(heap)
            del self._current[key]
            return key
        return None

    def next_deadline(self):
        """The earliest live deadline, or None."""
        heap = self._heap
        while heap and self._current.get(heap[0][2]) != heap[0][:2]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None
