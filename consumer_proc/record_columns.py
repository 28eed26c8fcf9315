"""A run of one partition's records as columns: the consumer's bulk representation.

``RecordColumns`` holds n records of one partition, all with the same leader epoch and
timestamp type, as parallel columns:

    offsets, timestamps         int64 arrays
    key_lengths, value_lengths  int64 arrays, -1 for null (Kafka's serialized sizes)
    keys / values               either positions into ``buffer`` (``key_starts``,
                                ``value_starts``: int64 arrays) or Python lists
    headers                     None when no record has headers, else one list per record
                                (``NO_HEADERS`` for a record without)

``columns_parser`` makes them from fetched batch bytes: the vectorised path leaves keys and
values where they lie in the fetched bytes (positions; nothing is copied until asked), the
per-record path hands over the lists it decoded. ``slice`` is cheap (numpy views, list
slices); ``values()`` / ``keys()`` copy each out as ``bytes``; ``value_array()`` gives fixed-size
values as one 2-D uint8 array; ``to_records`` makes kafka-python ``ConsumerRecord`` objects
with one C-level pass per field instead of Python code per record.

A value object: the fetcher builds it, then hands it to the consumer's caller, who owns it.
Not mutated after construction; any thread may read it.
"""
from __future__ import annotations

from itertools import repeat

import numpy as np

from consumer_proc.consumer_record import ConsumerRecord, make_record
from segments.record import accel

_EMPTY = np.empty(0, dtype=np.int64)
#: The headers of a record that has none (see ``to_records``).
NO_HEADERS = ()
#: The compiled ``to_records`` (consumer_proc/_records_accel.pyx), or None (``accel``).
_compiled = accel.load("consumer_proc._records_accel")


class RecordColumns:
    """n records of one partition as columns (module doc).

    ``buffer`` is the bytes the ``*_starts`` positions point into (None when keys and values
    are lists). ``leader_epoch`` and ``timestamp_type`` are the same for every record.
    """

    __slots__ = ("leader_epoch", "timestamp_type", "offsets", "timestamps", "key_lengths",
                 "value_lengths", "buffer", "key_starts", "value_starts", "_keys", "_values",
                 "headers")

    def __init__(self, leader_epoch, timestamp_type, offsets, timestamps, key_lengths,
                 value_lengths, *, buffer=None, key_starts=None, value_starts=None, keys=None,
                 values=None, headers=None):
        if (buffer is None) == (keys is None):
            raise ValueError("give either buffer with key_starts and value_starts, or the "
                             "keys and values lists")
        self.leader_epoch = leader_epoch
        self.timestamp_type = timestamp_type
        self.offsets = offsets
        self.timestamps = timestamps
        self.key_lengths = key_lengths
        self.value_lengths = value_lengths
        self.buffer = buffer
        self.key_starts = key_starts
        self.value_starts = value_starts
        self._keys = keys
        self._values = values
        self.headers = headers

    @classmethod
    def from_records(cls, leader_epoch, timestamp_type, records):
        """Columns of decoded ``segments.record.records.Record`` tuples (offset, timestamp,
        timestamp_type, key, value, headers), all of one batch."""
        if not records:
            return cls(leader_epoch, timestamp_type, _EMPTY, _EMPTY, _EMPTY, _EMPTY,
                       keys=[], values=[])
        offsets, timestamps, _, keys, values, headers = map(list, zip(*records))
        return cls(
            leader_epoch, timestamp_type, np.array(offsets, dtype=np.int64),
            np.array(timestamps, dtype=np.int64),
            np.array([-1 if k is None else len(k) for k in keys], dtype=np.int64),
            np.array([-1 if v is None else len(v) for v in values], dtype=np.int64),
            keys=keys, values=values,
            headers=[h or NO_HEADERS for h in headers] if any(headers) else None)

    def __len__(self):
        return len(self.offsets)

    def slice(self, start, stop):
        """Records ``start`` to ``stop`` (indexes into this run) as a new RecordColumns."""
        positional = self.buffer is not None
        return RecordColumns(
            self.leader_epoch, self.timestamp_type, self.offsets[start:stop],
            self.timestamps[start:stop], self.key_lengths[start:stop],
            self.value_lengths[start:stop], buffer=self.buffer,
            key_starts=self.key_starts[start:stop] if positional else None,
            value_starts=self.value_starts[start:stop] if positional else None,
            keys=None if positional else self._keys[start:stop],
            values=None if positional else self._values[start:stop],
            headers=None if self.headers is None else self.headers[start:stop])

    # -- field access ---------------------------------------------------------------------------

    def keys(self):
        """The keys as a list of bytes (None for a null key)."""
        if self._keys is not None:
            return self._keys
        return _cut(self.buffer, self.key_starts, self.key_lengths)

    def values(self):
        """The values as a list of bytes (None for a null value)."""
        if self._values is not None:
            return self._values
        return _cut(self.buffer, self.value_starts, self.value_lengths)

    def value_array(self):
        """The values as an ``(n, size)`` uint8 array; ValueError unless every value is
        non-null and ``size`` bytes long."""
        lengths = self.value_lengths
        if not len(lengths):
            return np.empty((0, 0), dtype=np.uint8)
        size = int(lengths[0])
        if size < 0 or not (lengths == size).all():
            raise ValueError(f"values are not all of one size: lengths {lengths.min()} to "
                             f"{lengths.max()} (-1 = null)")
        if self.buffer is None:
            return np.frombuffer(b"".join(self._values), dtype=np.uint8).reshape(-1, size)
        data = np.frombuffer(self.buffer, dtype=np.uint8)
        return data[self.value_starts[:, None] + np.arange(size)]

    def header_sizes(self):
        """kafka-python's serialized_header_size of each record: the bytes of its header
        keys (UTF-8) and values, -1 when it has no headers."""
        if self.headers is None:
            return [-1] * len(self)
        return [sum(len(k.encode()) + (0 if v is None else len(v)) for k, v in h) if h else -1
                for h in self.headers]

    # -- ConsumerRecords ------------------------------------------------------------------------

    def to_records(self, topic, partition, key_deserializer=None, value_deserializer=None):
        """The records as kafka-python ConsumerRecords, keys and values passed through the
        deserializers (``(topic, headers, data) -> object`` callables, or None).

        A record without headers gets ``NO_HEADERS``, one shared empty tuple, where
        kafka-python makes a new empty list: a list per record keeps every record tracked
        by the cyclic garbage collector, whose passes then cost a large share of the
        consumer's time (measured by perf.consumer_bench; figures: perf/README.md,
        "ConsumerRecords share one empty headers tuple"); a record of atoms only is
        untracked at its first pass. Reading — iteration, len, truth, dict() — is the
        same.

        The records are made in one C loop by ``consumer_proc/_records_accel.pyx`` when it is
        built (``segments.record.accel``), else by the C-level ``map`` below: the same
        objects either way."""
        n = len(self)
        headers = self.headers
        keys = self._keys
        values = self._values
        if key_deserializer is not None or value_deserializer is not None:
            each_headers = headers if headers is not None else [NO_HEADERS] * n
            if key_deserializer is not None:
                keys = list(map(key_deserializer, repeat(topic, n), each_headers, self.keys()))
            if value_deserializer is not None:
                values = list(map(value_deserializer, repeat(topic, n), each_headers,
                                  self.values()))
        if _compiled is not None and (self.buffer is None or self.buffer.__class__ is bytes):
            return _compiled.make_records(
                ConsumerRecord, topic, partition, self.leader_epoch, self.timestamp_type,
                self.offsets, self.timestamps, self.key_lengths, self.value_lengths,
                self.buffer, self.key_starts, self.value_starts, keys, values, headers,
                None if headers is None else self.header_sizes(), NO_HEADERS)
        if headers is None:
            headers = [NO_HEADERS] * n
        return list(map(make_record, zip(
            repeat(topic, n), repeat(partition, n), repeat(self.leader_epoch, n),
            self.offsets.tolist(), self.timestamps.tolist(), repeat(self.timestamp_type, n),
            self.keys() if keys is None else keys, self.values() if values is None else values,
            headers, repeat(None, n), self.key_lengths.tolist(), self.value_lengths.tolist(),
            self.header_sizes())))

    def __repr__(self):
        span = f"{self.offsets[0]}..{self.offsets[-1]}" if len(self) else "empty"
        return (f"RecordColumns({len(self)} records, offsets {span}, "
                f"{'positions' if self.buffer is not None else 'lists'})")


#: Records below which ``_cut`` takes the lengths' extremes from a list: numpy's min and max
#: cost about 1.5 µs each on a small array, a list's a fraction of it (5 records: 3.4
#: against 1.4 µs for the whole cut of 100-byte values; equal near 64).
_LIST_BELOW = 64


def _cut(buffer, starts, lengths):
    """``buffer[start:start + length]`` for each record, None where the length is -1."""
    if not len(lengths):
        return []
    if len(lengths) < _LIST_BELOW:
        sizes = lengths.tolist()
        shortest, longest = min(sizes), max(sizes)
    else:
        shortest, longest = int(lengths.min()), int(lengths.max())
    if shortest >= 0:
        if shortest == longest:  # one size: the cheapest comprehension
            return [buffer[start:start + shortest] for start in starts.tolist()]
        return [buffer[start:end]
                for start, end in zip(starts.tolist(), (starts + lengths).tolist())]
    if longest < 0:
        return [None] * len(lengths)
    return [None if length < 0 else buffer[start:start + length]
            for start, length in zip(starts.tolist(), lengths.tolist())]
