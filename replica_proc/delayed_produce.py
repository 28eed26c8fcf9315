"""The produce purgatory: acks=all Produce requests that wait for replication (Kafka's
DelayedProduce).

An acks=all (-1) Produce whose appends succeeded is answered once the high watermark (HW)
of every partition it appended to has passed its last appended offset (Kafka's DelayedProduce). If
the HW of one of them is still below it after the appends, the request is parked here — its
answer leaves its channel in request order, after those of the requests before it and before
those after it (``channel``) — and answered when, for each of those
partitions, one of these happens (Kafka's checkEnoughReplicasReachOffset):

- the HW reached the offset after its batches: NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND
  if the ISR is by then smaller than min.insync.replicas (the records are in the leader's
  log, but on fewer replicas than asked);
- this broker no longer leads the partition (a new metadata image; the partition deleted
  or re-created): NOT_LEADER_OR_FOLLOWER;

or, for the partitions still waiting, when the request's ``timeout_ms`` runs out:
REQUEST_TIMED_OUT. A partition keeps its base offset in every answer, as Kafka's does.

``check(key)`` is called whenever something may have settled ``key``: its HW moved, or the
metadata changed it. ``lookup(key)`` (given to the purgatory) is the Partition this broker
hosts for ``key`` now, or None: a Partition object other than the one appended to means
the one appended to is gone. The purgatory only decides; the caller answers. Times are
the caller's monotonic clock in seconds, passed in.

Owner: the broker's loop thread, the only caller. Not thread-safe.
"""
from __future__ import annotations

import heapq
import itertools

from cluster.errors import NotLeaderForPartitionError, RequestTimedOutError


class PendingPartition:
    """One partition of a DelayedProduce still waiting: the Partition appended to, the
    offset its HW must reach, and where its answer sits in the response (``results[i]``)."""

    __slots__ = ("key", "partition", "required_offset", "results", "i")

    def __init__(self, key, partition, required_offset, results, i):
        self.key = key
        self.partition = partition
        self.required_offset = required_offset
        self.results = results
        self.i = i

    def settle(self, error):
        """Put ``error`` (None: success) into this partition's answer."""
        if error is not None:
            self.results[self.i] = self.results[self.i]._replace(
                error_code=error.errno, message=str(error))


class DelayedProduce:
    """One parked acks=all Produce: its deadline, its waiting partitions by key, the
    response's ``topics`` (``[(name, [PartitionResult])]``, completed in place) and the
    caller's ``context``."""

    __slots__ = ("deadline", "timeout_ms", "waiting", "topics", "context", "done")

    def __init__(self, deadline, timeout_ms, pending, topics, context):
        self.deadline = deadline
        self.timeout_ms = timeout_ms
        self.waiting = {p.key: p for p in pending}
        self.topics = topics
        self.context = context
        self.done = False

    def __repr__(self):
        return (f"DelayedProduce(deadline={self.deadline:.3f}, waiting for "
                f"{sorted(self.waiting)})")


class ProducePurgatory:
    """Parked acks=all produces by partition and by deadline (see the module doc)."""

    def __init__(self, lookup):
        self._lookup = lookup
        self._watchers = {}  # (topic, index) -> [DelayedProduce]
        self._deadlines = []  # heap of (deadline, sequence, DelayedProduce)
        self._sequence = itertools.count()
        self._count = 0

    def __len__(self):
        return self._count

    def park(self, produce):
        """Watch ``produce`` until it completes, expires or is cancelled."""
        for key in produce.waiting:
            self._watchers.setdefault(key, []).append(produce)
        heapq.heappush(self._deadlines, (produce.deadline, next(self._sequence), produce))
        self._count += 1

    def check(self, key):
        """Settle what can be settled of the produces waiting on ``key``; return those
        that are complete (removed from the purgatory)."""
        watchers = self._watchers.get(key)
        if not watchers:
            return []
        ready = []
        for produce in watchers:
            pending = produce.waiting[key]
            current = self._lookup(key)
            if current is not pending.partition:
                done, error = True, NotLeaderForPartitionError(
                    f"{key[0]}-{key[1]}: this broker no longer hosts the replica the "
                    f"records were appended to (partition deleted or moved)")
            else:
                done, error = current.check_enough_replicas(pending.required_offset)
            if done:
                pending.settle(error)
                del produce.waiting[key]
                if not produce.waiting:
                    ready.append(produce)
        watchers[:] = [p for p in watchers if key in p.waiting]
        if not watchers:
            del self._watchers[key]
        for produce in ready:
            self._finish(produce)
        return ready

    def on_change(self, keys):
        """Partitions in ``keys`` changed (leader, ISR, deleted): the produces now
        complete."""
        ready = []
        for key in keys:
            ready += self.check(key)
        return ready

    def expire(self, now):
        """The produces whose deadline is <= ``now``, their waiting partitions answered
        REQUEST_TIMED_OUT (removed from the purgatory)."""
        due = []
        heap = self._deadlines
        while heap and (heap[0][2].done or heap[0][0] <= now):
            _, _, produce = heapq.heappop(heap)
            if produce.done:
                continue
            for key, pending in produce.waiting.items():
                pending.settle(RequestTimedOutError(
                    f"{key[0]}-{key[1]}: the high watermark "
                    f"{pending.partition.high_watermark} did not reach offset "
                    f"{pending.required_offset} (the end of the appended records) within "
                    f"the request's timeout of {produce.timeout_ms} ms"))
            self._finish(produce)
            due.append(produce)
        return due

    def cancel(self, produce):
        """Forget ``produce`` (its client went away). Safe for one already gone."""
        if not produce.done:
            self._finish(produce)

    def next_deadline(self):
        """The earliest deadline of a parked produce, or None."""
        heap = self._deadlines
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _finish(self, produce):
        produce.done = True
        self._count -= 1
        for key in produce.waiting:
            watchers = self._watchers.get(key)
            if watchers is not None:
                watchers.remove(produce)
                if not watchers:
                    del self._watchers[key]
