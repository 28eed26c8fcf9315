"""The producer's RecordAccumulator: batches per partition between send() and the sender.

Kafka's design (``RecordAccumulator``), in Python:

* One deque of ``ProducerBatch`` per partition. ``append()`` adds a record to the last batch
  of its partition's deque through the batch's ``RecordBatchBuilder``; when the builder
  refuses it (full), a new batch is opened over a fresh buffer from the ``BufferPool``
  (``batch_size`` bytes, or the record's size if larger) — the only place ``send()`` may
  block, up to ``max_block_ms``, raising KafkaTimeoutError when memory stays short.
* A batch takes records only while it is the last of its deque: it is closed for appends
  (Kafka's ``closeForRecordAppends``) when it refuses a record, when another batch is queued
  behind it, and when it leaves the deque (drained, expired, aborted) — and every batch at
  ``close()``. That makes ``send()``'s fast path safe: the producer keeps the open batch of
  its topic's sticky partition and appends to it directly with
  ``RecordBatchBuilder.append_value(..., append_lock)``, which holds the lock only around
  its check-and-store (no Python call made while holding it, so no appender waits for a
  thread switched out mid-call); a batch that has been closed meanwhile refuses, and the
  record goes through ``append()``.
* ``ready()`` tells the sender which brokers lead partitions with a *sendable* batch: full
  (or followed by another), lingered ``linger_ms``, a retry whose backoff passed, or
  anything at all while a flush or close is under way or appenders wait for memory.
  ``drain()`` then takes, per ready broker, at most one batch per partition, up to
  ``max_request_size`` bytes per request (always at least one batch);
  ``drain_requests()`` takes several such requests per broker under one lock.
* A retried batch goes back to the front of its deque (``reenqueue``) with a backoff, and,
  after an invalid-metadata error, a metadata ticket (``ClusterMetadata.request_update``):
  it is not sendable before the metadata cache has answered that ticket (``answered`` of
  ``ready`` / ``drain_requests``), so the retry goes to the leader named by metadata fetched
  after the error, not to the same stale one (a refresh that fails answers too: the retry
  then goes where the cache says). A completed batch gives its buffer back to the pool
  (``deallocate``).
* With an idempotent producer (``transaction_manager``), ``drain`` asks it whether a
  partition's first batch may go (``may_drain``: a producer id, at most five batches of
  the partition in requests, a retry only as the partition's lowest sequence; in a
  transaction, a partition already added to it) and stamps
  each batch it takes (producer id, epoch, base sequence: Kafka's ``drain``); a retried
  batch goes back in sequence order among the retried batches at the front of its deque.
* ``append_built()`` queues batches that arrive built (the bulk send), behind the
  partition's open batch, so a partition's records keep their order.

The sticky partitioner's "abort on new batch" (Kafka's KIP-480 hook) is ``append(...,
abort_on_new_batch=True)``: it returns None instead of opening a batch, so the producer can
pick another partition first.

Thread safety: every deque, every open batch's builder and ``_incomplete`` are guarded by
``_lock`` (also published as ``append_lock``); appenders (any user thread) hold it for one
builder append; the sender thread holds it to scan and drain. A drained batch is closed
for appends and reachable by the sender only, which builds it outside the lock.
"""
from __future__ import annotations

import threading
import time
from collections import deque

from cluster.errors import IllegalStateError, KafkaTimeoutError, MessageSizeTooLargeError
from cluster.producer.batch import ProducerBatch
from cluster.producer.buffer_pool import BufferExhaustedError, BufferPool, BufferPoolClosedError
from segments.record.compression import codec_id
from segments.record.records import RecordBatchBuilder, as_bytes

#: Longest the sender sleeps before looking again at a retried batch whose metadata refresh
#: has not been answered yet, in seconds; the answer itself ends its poll earlier.
METADATA_WAIT = 0.05


class RecordAccumulator:
    """Batches per partition (module doc). Owner: one KafkaProducer.

    ``clock`` is monotonic seconds (linger, backoff, delivery timeout, and the pool's waits,
    which need a clock that advances). ``wakeup`` is called (without the lock) whenever a
    batch may have become sendable.
    """

    def __init__(self, *, batch_size, buffer_memory, compression_type, linger_ms, max_block_ms,
                 max_request_size, clock=time.monotonic, wakeup=lambda: None,
                 transaction_manager=None):
        self.batch_size = batch_size
        self.max_block_ms = max_block_ms
        self._max_request_size = max_request_size
        self._buffer_memory = buffer_memory
        self._codec = codec_id(compression_type or "none")
        self._linger = linger_ms / 1000
        self._clock = clock
        self.wakeup = wakeup
        self.transaction_manager = transaction_manager  # None: not idempotent
        self.pool = BufferPool(buffer_memory, batch_size, clock)
        self._batches = {}          # topic -> {partition: deque of ProducerBatch}
        self._incomplete = set()    # every batch appended and not yet done
        self._flushes = 0           # flush() calls under way
        self.oldest_created = None  # set by expired()
        self._closed = False
        self._lock = threading.Lock()
        #: The lock a fast append to a batch this accumulator handed out holds
        #: (``RecordBatchBuilder.append_value``): the one guarding every deque.
        self.append_lock = self._lock

    # -- appending (any thread) ------------------------------------------------------------

    def append(self, topic, partition, timestamp, key, value, headers,
               abort_on_new_batch=False):
        """Add a record; return ``(batch, index in batch)``, or None when
        ``abort_on_new_batch`` and the record would need a new batch."""
        lock = self._lock
        lock.acquire()
        try:
            if self._closed:
                raise IllegalStateError(f"producer closed; cannot append to {topic}-{partition}")
            partitions = self._batches.get(topic)
            batches = None if partitions is None else partitions.get(partition)
            if batches:
                batch = batches[-1]
                builder = batch.builder
                if builder is not None and not batch.full:  # full: closed, it refuses
                    index = builder.append(timestamp, key, value, headers)
                    if index is not None:
                        return batch, index
                    _close(batch)
        finally:
            lock.release()
        if abort_on_new_batch:
            return None
        return self._append_new(topic, partition, timestamp, key, value, headers)

    def _append_new(self, topic, partition, timestamp, key, value, headers):
        """Open a new batch (blocking for memory up to max_block_ms) and append to it."""
        if key is not None and key.__class__ is not bytes:
            key = as_bytes(key, "key")
        if value is not None and value.__class__ is not bytes:
            value = as_bytes(value, "value")
        estimate = RecordBatchBuilder.estimate_size_in_bytes(key, value, headers or ())
        self._check_record_size(estimate, topic, partition)
        buffer = self._allocate(max(self.batch_size, estimate), f"{topic}-{partition}")
        with self._lock:
            if self._closed:
                self.pool.deallocate(buffer)
                raise IllegalStateError(f"producer closed; cannot append to {topic}-{partition}")
            batches = self._batches.setdefault(topic, {}).setdefault(partition, deque())
            if batches:  # another thread may have opened one meanwhile
                last = batches[-1]
                if last.builder is not None and not last.full:
                    index = last.builder.append(timestamp, key, value, headers)
                    if index is not None:
                        self.pool.deallocate(buffer)
                        return last, index
                    _close(last)
            builder = RecordBatchBuilder(self._codec, self.batch_size, buffer=buffer)
            batch = ProducerBatch(topic, partition, builder, buffer, self._clock())
            try:
                index = builder.append(timestamp, key, value, headers)
            except BaseException:
                self.pool.deallocate(buffer)
                raise
            batches.append(batch)
            self._incomplete.add(batch)
        self.wakeup()
        return batch, index

    def _check_record_size(self, size, topic, partition):
        """Kafka's producer-side limits on one record (MessageSizeTooLargeError)."""
        for limit, name in ((self._max_request_size, "max_request_size"),
                            (self._buffer_memory, "buffer_memory")):
            if size > limit:
                raise MessageSizeTooLargeError(
                    f"{topic}-{partition}: the message is {size} bytes when serialized, "
                    f"which is larger than {limit}, the value of {name}")

    def _allocate(self, size, what):
        try:
            return self.pool.allocate(size, self.max_block_ms)
        except BufferExhaustedError as exc:
            raise KafkaTimeoutError(f"{what}: {exc}") from exc
        except BufferPoolClosedError as exc:
            raise IllegalStateError(f"producer closed; cannot append to {what}") from exc

    def allocate_built(self, size, what):
        """A pool buffer of ``size`` bytes for a batch built straight into it (blocking
        for memory up to max_block_ms); queue it with ``append_built(..., pooled=True)`` or
        give it back with ``pool.deallocate``."""
        return self._allocate(size, what)

    def append_built(self, topic, partition, data, record_count, record_indices, pooled=False):
        """Queue a batch that arrives built (``data``: its bytes), copying it into a pool
        buffer (blocking for memory up to max_block_ms) unless ``pooled``: then ``data`` is
        a buffer from ``allocate_built``, queued as it is. Returns the ProducerBatch."""
        if pooled:
            buffer = data
        else:
            buffer = self._allocate(len(data), f"{topic}-{partition}")
            buffer[:] = data
        batch = ProducerBatch.of_built(topic, partition, buffer, record_count, buffer,
                                       self._clock())
        batch.record_indices = record_indices
        batch.full = True
        with self._lock:
            if self._closed:
                self.pool.deallocate(buffer)
                raise IllegalStateError(f"producer closed; cannot append to {topic}-{partition}")
            batches = self._batches.setdefault(topic, {}).setdefault(partition, deque())
            if batches:
                _close(batches[-1])  # records sent later must not go in front of this batch
            batches.append(batch)
            self._incomplete.add(batch)
        self.wakeup()
        return batch

    # -- the sender thread -------------------------------------------------------------------

    def ready(self, now, topics, answered=0):
        """``(nodes, unknown_topics, delay)``: the leaders of partitions with a sendable batch,
        the topics whose sendable batches have no known leader, and the seconds until a
        batch not yet sendable becomes so (None if there is none). ``topics``: the metadata
        cache's TopicMetadata by name; ``answered``: its ``answered`` ticket (module doc)."""
        nodes = set()
        unknown = set()
        delay = None
        with self._lock:
            hurry = self._flushes > 0 or self._closed or self.pool.queued > 0
            for topic, partitions in self._batches.items():
                info = topics.get(topic)
                for partition, batches in partitions.items():
                    if not batches:
                        continue
                    wait = self._wait(batches, now, hurry, answered)
                    if wait > 0:
                        delay = wait if delay is None else min(delay, wait)
                        continue
                    leader = -1 if info is None else info.leaders.get(partition, -1)
                    if leader < 0:
                        unknown.add(topic)
                    else:
                        nodes.add(leader)
        return nodes, unknown, delay

    def _wait(self, batches, now, hurry, answered):
        """Seconds before the first of ``batches`` is sendable (<= 0: now)."""
        batch = batches[0]
        if batch.attempts:
            if batch.metadata_ticket > answered:
                return max(batch.retry_at - now, METADATA_WAIT)
            return batch.retry_at - now
        if hurry or batch.full or len(batches) > 1:
            return 0.0
        return batch.created + self._linger - now

    def drain(self, now, topics, nodes, max_request_size, muted=(), answered=0):
        """Take the sendable batches led by ``nodes``: ``{node: [batches]}``, one batch per
        partition, up to ``max_request_size`` bytes per node (at least one batch). Partitions
        in ``muted`` (TopicPartitions) are skipped."""
        requests = self.drain_requests(now, topics, dict.fromkeys(nodes, 1), max_request_size,
                                       muted, answered)
        return {node: found[0] for node, found in requests.items()}

    def drain_requests(self, now, topics, slots, max_request_size, muted=(), answered=0):
        """Take the batches of up to ``slots[node]`` requests per node: ``{node: [[batches
        of one request], ...]}``, requests in the order they must be sent. Each request
        holds at most one batch per partition and ``max_request_size`` bytes (at least one
        batch) — what ``drain`` takes, that many times over, under one lock."""
        drained = {}
        txn = self.transaction_manager
        with self._lock:
            hurry = self._flushes > 0 or self._closed or self.pool.queued > 0
            queues = []  # (leader, deque) of the partitions led by a node with slots
            for topic, partitions in self._batches.items():
                info = topics.get(topic)
                if info is None:
                    continue
                leaders = info.leaders
                for partition, batches in partitions.items():
                    if batches:
                        leader = leaders.get(partition, -1)
                        if leader in slots:
                            queues.append((leader, batches))
            left = {node: count for node, count in slots.items() if count > 0}
            while queues and left:
                taken = {}
                sizes = {}
                for leader, batches in queues:
                    if leader not in left or not batches or self._wait(batches, now, hurry,
                                                                         answered) > 0:
                        continue
                    batch = batches[0]
                    if muted and batch.topic_partition in muted:
                        continue
                    if txn is not None and not txn.may_drain(batch):
                        continue
                    size = batch.size
                    total = sizes.get(leader, 0)
                    if total and total + size > max_request_size:
                        continue
                    _take(batches)
                    if txn is not None:
                        txn.stamp(batch)
                    sizes[leader] = total + size
                    found = taken.get(leader)
                    if found is None:
                        taken[leader] = [batch]
                    else:
                        found.append(batch)
                for node in list(left):
                    found = taken.get(node)
                    if found is None:
                        del left[node]  # nothing more for it now
                        continue
                    requests = drained.get(node)
                    if requests is None:
                        drained[node] = [found]
                    else:
                        requests.append(found)
                    left[node] -= 1
                    if not left[node]:
                        del left[node]
        return drained

    def reenqueue(self, batch, retry_at, metadata_ticket=0):
        """Put a batch that failed with a retriable error back at the front of its deque,
        not to be sent before ``retry_at`` (clock seconds), nor before the metadata cache
        answered ``metadata_ticket`` (0: no refresh to wait for)."""
        batch.retry_at = retry_at
        batch.metadata_ticket = metadata_ticket
        with self._lock:
            batches = self._batches.setdefault(batch.topic, {}).setdefault(batch.partition,
                                                                           deque())
            if batch.base_sequence < 0:
                batches.appendleft(batch)
                return
            index = 0  # behind the retried batches stamped before it (module doc)
            for queued in batches:
                if queued.base_sequence < 0 or queued.sequence_order > batch.sequence_order:
                    break
                index += 1
            batches.insert(index, batch)

    def expired(self, now, delivery_timeout):
        """Remove and return the queued batches older than ``delivery_timeout`` seconds.
        Sets ``oldest_created``: the creation time of the oldest batch still queued (None if
        none is), so the caller knows when the next one can expire."""
        found = []
        oldest = None
        with self._lock:
            for partitions in self._batches.values():
                for batches in partitions.values():
                    if not batches:
                        continue
                    if now - batches[0].created >= delivery_timeout:
                        old = [b for b in batches if now - b.created >= delivery_timeout]
                        keep = [b for b in batches if now - b.created < delivery_timeout]
                        for batch in old:
                            batch.close_for_appends()
                        found += old
                        batches.clear()
                        batches.extend(keep)
                    for batch in batches:  # retried batches keep their creation time
                        if oldest is None or batch.created < oldest:
                            oldest = batch.created
                        if not batch.attempts:
                            break  # fresh batches behind it are younger
            self.oldest_created = oldest
        return found

    def deallocate(self, batch):
        """The batch is done: give its buffer back and forget it."""
        self.deallocate_many((batch,))

    def deallocate_many(self, batches):
        """``deallocate`` for several done batches: one lock here, one in the pool."""
        with self._lock:
            discard = self._incomplete.discard
            for batch in batches:
                discard(batch)
        buffers = []
        for batch in batches:
            if batch.buffer is not None:
                buffers.append(batch.buffer)
                batch.buffer = batch.builder = None
        if buffers:
            self.pool.deallocate_many(buffers)

    def has_undrained(self):
        with self._lock:
            return any(batches for partitions in self._batches.values()
                       for batches in partitions.values())

    def drain_all(self):
        """Remove and return every queued batch (a forced close aborts them)."""
        with self._lock:
            found = []
            for partitions in self._batches.values():
                for batches in partitions.values():
                    for batch in batches:
                        batch.close_for_appends()
                    found += batches
                    batches.clear()  # the deques stay: producers hold them (queue())
        return found

    # -- flush and close (any thread) --------------------------------------------------------

    def begin_flush(self):
        """Make every batch sendable at once until end_flush()."""
        with self._lock:
            self._flushes += 1
        self.wakeup()

    def end_flush(self):
        with self._lock:
            self._flushes -= 1

    def incomplete(self):
        """A snapshot of the batches appended and not yet done."""
        with self._lock:
            return list(self._incomplete)

    def close(self):
        """Refuse new appends (what is queued is still sent); wakes appenders waiting for
        memory with IllegalStateError."""
        with self._lock:
            self._closed = True
            for partitions in self._batches.values():
                for batches in partitions.values():
                    for batch in batches:
                        batch.close_for_appends()
        self.pool.close()
        self.wakeup()


def _close(batch):
    """A batch refused a record, or another batch was queued behind it: it takes no more
    (Kafka's closeForRecordAppends) and is sendable at once. Caller holds the lock."""
    batch.full = True
    batch.close_for_appends()


def _take(batches):
    """Pop the first of a partition's batches for sending, closed for appends first (an
    appender that picked it a moment ago then finds it full). Caller holds the lock."""
    batch = batches[0]
    batch.close_for_appends()
    return batches.popleft()
