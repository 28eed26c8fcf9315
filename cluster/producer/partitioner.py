"""Which partition a record goes to: Kafka's murmur2 for keys; sticky, round-robin or random
without.

Keys land where Kafka puts them: ``murmur2`` is Java's
``org.apache.kafka.common.utils.Utils.murmur2`` bit for bit (MurmurHash2, seed 0x9747b28c,
32-bit wrap-around arithmetic, signed result) and a keyed record goes to
``toPositive(murmur2(key)) % numPartitions`` over *all* partitions of the topic, available
or not, so a key never moves while a leader is away. ``murmur2_many`` and
``partitions_for_keys`` do the same for many keys at once with numpy (a bulk send pays a few
array operations per 4 key bytes instead of a Python loop per key).

Records without a key follow the partitioner the producer was given:

- ``DefaultPartitioner`` (Kafka's default since 2.4, KIP-480): stick to one partition per
  topic until the producer reports, through ``on_new_batch``, that the record would open a
  new batch there; then pick another available partition at random. Batches fill up, so
  linger and per-batch costs are paid once per full batch.
- ``RoundRobinPartitioner`` (Kafka's ``RoundRobinPartitioner``): every record to the next
  available partition, per topic; like Kafka's, it ignores keys.
- ``RandomPartitioner`` (kafka-python's old default): keys hashed, null keys to a random
  available partition.

A partitioner answers ``partition(topic, key_bytes, all_partitions, available)`` with one
element of ``all_partitions`` (the topic's partition ids, non-empty; ``available`` = those
with a leader, possibly empty) and takes ``on_new_batch(topic, prev_partition,
all_partitions, available)`` from the producer's send path. Every built-in is also callable
as ``partitioner(key_bytes, all_partitions, available)``, the shape kafka-python's
``partitioner=`` option accepts, and ``resolve_partitioner`` wraps a user function of that
shape. Randomness comes from an injectable ``random.Random`` so tests are deterministic.
"""
from __future__ import annotations

import itertools
import random
import struct
import threading

from cluster.errors import KafkaConfigurationError

#: Java's ``int seed = 0x9747b28c``.
SEED = 0x9747B28C
#: MurmurHash2's mixing constant ``m``.
M = 0x5BD1E995
#: MurmurHash2's shift ``r``.
R = 24
MASK32 = 0xFFFFFFFF
#: Java's ``Utils.toPositive``: clear the sign bit (not ``abs``, which fails on MIN_VALUE).
POSITIVE_MASK = 0x7FFFFFFF

#: n -> Struct unpacking n little-endian uint32 words: the full 4-byte blocks of a key.
_WORDS = {}


def _words(count):
    try:
        return _WORDS[count]
    except KeyError:
        return _WORDS.setdefault(count, struct.Struct(f"<{count}I"))


def _murmur2_unsigned(data):
    """murmur2 of ``data`` as an unsigned 32-bit int (Java's bits, read without sign)."""
    length = len(data)
    h = SEED ^ length
    full = length >> 2
    if full:
        for k in _words(full).unpack_from(data):
            k = (k * M) & MASK32
            k ^= k >> R
            # Only the low 32 bits matter, so mask once after xoring the two products.
            h = ((h * M) ^ (k * M)) & MASK32
    tail = length & 3
    if tail:
        base = full << 2
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h = ((h ^ data[base]) * M) & MASK32
    h ^= h >> 13
    h = (h * M) & MASK32
    return h ^ (h >> 15)


def murmur2(data):
    """Java's ``Utils.murmur2(data)``: a signed 32-bit int. ``data``: bytes-like (bytes,
    bytearray, memoryview of bytes)."""
    h = _murmur2_unsigned(data)
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(number):
    """Java's ``Utils.toPositive``: ``number & 0x7fffffff``."""
    return number & POSITIVE_MASK


def partition_for_key(key_bytes, num_partitions):
    """Kafka's partition for a keyed record: ``toPositive(murmur2(key)) % num_partitions``."""
    return (_murmur2_unsigned(key_bytes) & POSITIVE_MASK) % num_partitions


def murmur2_many(keys):
    """``murmur2`` of every key in ``keys`` (a sequence of bytes objects, no None), as an
    int32 numpy array equal element by element to ``[murmur2(k) for k in keys]``.

    Keys are laid out as rows of little-endian uint32 words, zero-padded; each word column
    is mixed into the rows that have a full word there, the partial last word (zero bytes
    beyond the key's end, as the tail switch leaves them) into the rows that have one.
    numpy's uint32 multiply wraps like Java's int multiply. numpy is imported here, by the
    bulk send's first call, not with the producer (``kafka_producer``'s module doc).
    """
    import numpy as np
    m32 = np.uint32(M)
    count = len(keys)
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=count)
    if count == 0:
        return np.zeros(0, dtype=np.int32)
    words_per_row = max(1, (int(lengths.max()) + 3) >> 2)
    row_bytes = words_per_row << 2
    # Gather every key into a zero-padded row: one fancy index over the joined keys.
    joined = np.frombuffer(b"".join(keys) + bytes(row_bytes), dtype=np.uint8)
    starts = np.cumsum(lengths) - lengths
    columns = np.arange(row_bytes, dtype=np.int64)
    rows = joined[starts[:, None] + columns]
    rows[columns >= lengths[:, None]] = 0
    words = rows.view("<u4")  # shape (count, words_per_row)

    full = lengths >> 2
    h = (np.uint32(SEED) ^ lengths.astype(np.uint32))
    for column in range(int(full.max())):
        k = words[:, column] * m32
        k ^= k >> np.uint32(R)
        k *= m32
        h = np.where(full > column, (h * m32) ^ k, h)
    tail_word = words[np.arange(count), np.minimum(full, words_per_row - 1)]
    h = np.where((lengths & 3) > 0, (h ^ tail_word) * m32, h)
    h ^= h >> np.uint32(13)
    h *= m32
    h ^= h >> np.uint32(15)
    return h.view(np.int32)


def partitions_for_keys(keys, num_partitions):
    """``partition_for_key`` for every key in ``keys``, as an int64 numpy array."""
    hashes = murmur2_many(keys).view("<u4").astype("<i8")
    return (hashes & POSITIVE_MASK) % num_partitions


class DefaultPartitioner:
    """Kafka's built-in partitioner: murmur2 for keys, sticky for null keys (KIP-480).

    Owned by one producer; ``partition`` is called by every thread that calls ``send()``,
    ``on_new_batch`` by the send path when a null-key record would open a new batch on the
    sticky partition. The sticky map is read without a lock (one dict lookup per record);
    changing it takes ``_lock``, so two threads reporting the same full batch rotate once.
    """

    def __init__(self, rng=None):
        self._rng = rng or random.Random()
        self._sticky = {}  # topic -> partition; guarded by _lock for writes
        self._lock = threading.Lock()

    def partition(self, topic, key_bytes, all_partitions, available):
        if key_bytes is not None:
            return all_partitions[
                (_murmur2_unsigned(key_bytes) & POSITIVE_MASK) % len(all_partitions)]
        sticky = self._sticky.get(topic)
        if sticky is None:
            with self._lock:
                sticky = self._sticky.get(topic)
                if sticky is None:
                    sticky = self._next_sticky(topic, None, all_partitions, available)
        return sticky

    def on_new_batch(self, topic, prev_partition, all_partitions, available):
        """The record for ``prev_partition`` would open a new batch: stick elsewhere.

        A report about a partition that is no longer the sticky one (another thread already
        rotated) changes nothing, as in Kafka's ``StickyPartitionCache.nextPartition``.
        """
        with self._lock:
            if self._sticky.get(topic) == prev_partition:
                self._next_sticky(topic, prev_partition, all_partitions, available)

    def _next_sticky(self, topic, old, all_partitions, available):
        """Pick and store a new sticky partition for ``topic``; caller holds ``_lock``."""
        if not available:
            new = self._rng.choice(all_partitions)
        elif len(available) == 1:
            new = available[0]
        else:
            new = self._rng.choice([p for p in available if p != old] or available)
        self._sticky[topic] = new
        return new

    def __call__(self, key_bytes, all_partitions, available):
        """kafka-python's ``partitioner(key_bytes, all_partitions, available)`` shape."""
        return self.partition(None, key_bytes, all_partitions, available)


class RoundRobinPartitioner:
    """Kafka's ``RoundRobinPartitioner``: each record to the next partition, key ignored.

    Cycles over the available partitions (all of them when none is available) with one
    counter per topic. Owned by one producer, called by every ``send()`` thread: taking the
    next value of an ``itertools.count`` is atomic under the GIL.
    """

    def __init__(self):
        self._counters = {}  # topic -> itertools.count

    def partition(self, topic, key_bytes, all_partitions, available):
        counter = self._counters.get(topic)
        if counter is None:
            counter = self._counters.setdefault(topic, itertools.count())
        pool = available or all_partitions
        return pool[next(counter) % len(pool)]

    def on_new_batch(self, topic, prev_partition, all_partitions, available):
        """Batches do not steer round-robin: nothing to do."""

    def __call__(self, key_bytes, all_partitions, available):
        """kafka-python's ``partitioner(key_bytes, all_partitions, available)`` shape."""
        return self.partition(None, key_bytes, all_partitions, available)


class RandomPartitioner:
    """murmur2 for keys, a uniformly random available partition for null keys.

    kafka-python's default before it adopted sticky partitioning. Owned by one producer;
    any thread may call it (``random.Random`` methods are thread-safe in CPython).
    """

    def __init__(self, rng=None):
        self._rng = rng or random.Random()

    def partition(self, topic, key_bytes, all_partitions, available):
        if key_bytes is not None:
            return all_partitions[
                (_murmur2_unsigned(key_bytes) & POSITIVE_MASK) % len(all_partitions)]
        return self._rng.choice(available or all_partitions)

    def on_new_batch(self, topic, prev_partition, all_partitions, available):
        """Batches do not steer a random choice: nothing to do."""

    def __call__(self, key_bytes, all_partitions, available):
        """kafka-python's ``partitioner(key_bytes, all_partitions, available)`` shape."""
        return self.partition(None, key_bytes, all_partitions, available)


class CallablePartitioner:
    """Adapts a user function ``fn(key_bytes, all_partitions, available) -> partition``.

    The function is called for every record, keyed or not, exactly as kafka-python calls
    its ``partitioner`` option; whether it is thread-safe is the user's business.
    """

    def __init__(self, fn):
        self.fn = fn

    def partition(self, topic, key_bytes, all_partitions, available):
        return self.fn(key_bytes, all_partitions, available)

    def on_new_batch(self, topic, prev_partition, all_partitions, available):
        """A plain function has no batch hook: nothing to do."""


#: The built-ins by name (``cluster.config.client.PARTITIONER_NAMES``, which the producer's
#: ``partitioner=`` is checked against).
PARTITIONERS = {
    "default": DefaultPartitioner,
    "sticky": DefaultPartitioner,
    "round_robin": RoundRobinPartitioner,
    "random": RandomPartitioner,
}


def resolve_partitioner(spec=None):
    """The partitioner object for the producer's ``partitioner=`` value.

    ``None`` or a name in ``PARTITIONERS`` -> a new built-in; an object with ``partition``
    and ``on_new_batch`` -> itself; any other callable -> ``CallablePartitioner(spec)``.
    Anything else raises ``KafkaConfigurationError``.
    """
    if spec is None:
        return DefaultPartitioner()
    if isinstance(spec, str) and spec in PARTITIONERS:
        return PARTITIONERS[spec]()
    if hasattr(spec, "partition") and hasattr(spec, "on_new_batch"):
        return spec
    if callable(spec):
        return CallablePartitioner(spec)
    raise KafkaConfigurationError(
        f"partitioner {spec!r} is neither one of {sorted(PARTITIONERS)} "
        f"nor a callable(key_bytes, all_partitions, available)")
