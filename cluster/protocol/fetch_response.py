"""A Fetch response frame written in place, the log bytes copied straight from the files.

This design's sendfile: the response's size is known before a byte is written (the fixed
fields plus each partition's ``LogSlice.size``), so the broker claims one response-ring slot
of exactly that size, packs the fields into it and lets ``LogSlice.read_into`` ``preadv``
each partition's batches from its segment file into the shared memory. The batches are
never decoded nor held in a Python object.

The layout (FetchResponse v4-11 behind response header v0) is
``cluster.protocol.frame_descriptor``'s; the bytes are those
``cluster.protocol.frames.encode_response`` writes for the same response (the protocol
tests check byte for byte at every version). Records are an empty (length 0) field where a
partition has none, as Kafka's MemoryRecords.EMPTY; ``aborted_transactions`` is null for
read_uncommitted and, for read_committed, the partition's ``aborted_transactions`` (the
transactions aborted within the records returned: objects with ``producer_id`` and
``first_offset``, such as ``segments.txn_index.AbortedTxn``), 16 bytes each.

The usual answer — one topic, one partition, read_uncommitted (a consumer or follower of one
partition per leader) — has its fixed bytes packed by one ``Struct`` per version and topic
name, made on first use (``_single``), before the records are read in after them.

Pure: no state beyond the frame being built (and that cache of layouts); any thread, though
the slices it reads from belong to the broker's loop thread.
"""
from __future__ import annotations

from cluster.protocol import frame_descriptor as d

#: ``preferred_read_replica`` (v11) when there is none.
NO_PREFERRED_REPLICA = -1


class PartitionData:
    """One partition's part of a Fetch response; ``records`` is a LogSlice or None."""

    __slots__ = ("index", "error_code", "high_watermark", "last_stable_offset",
                 "log_start_offset", "records", "aborted_transactions")

    def __init__(self, index, error_code, high_watermark=-1, last_stable_offset=-1,
                 log_start_offset=-1, records=None, aborted_transactions=()):
        self.index = index
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.records = records
        #: Sent for read_committed only (null for read_uncommitted).
        self.aborted_transactions = aborted_transactions

    @property
    def records_size(self):
        return self.records.size if self.records is not None else 0

    @property
    def aborted_size(self):
        """Bytes of the aborted transactions' entries (read_committed)."""
        return d.FETCH_ABORTED.size * len(self.aborted_transactions)


def partition_overhead(version):
    """Bytes of one partition's fixed fields (no aborted transactions, no records)."""
    return ((d.FETCH_PARTITION_V5 if version >= 5 else d.FETCH_PARTITION_V4).size
            + (d.FETCH_RECORDS_V11 if version >= 11 else d.FETCH_RECORDS).size)


def topic_overhead(name):
    """Bytes of one topic's fixed fields: its name and its partition count."""
    return d.STRING_LENGTH.size + len(name.encode()) + d.ARRAY_LENGTH.size


def frame_overhead(version):
    """Bytes of the response header and the top-level fields."""
    return d.RESPONSE_BODY_OFFSET + (d.FETCH_TOP_V7 if version >= 7 else d.FETCH_TOP_V4).size


#: (version, topic name) -> (Struct of a one-partition frame's fixed bytes, encoded name)
_SINGLE = {}


def _single(version, name):
    """The layout of everything but the records of a frame answering one partition of
    ``name`` at ``version``, read_uncommitted (module doc)."""
    encoded = name.encode()
    parts = [d.RESPONSE_PREFIX, d.FETCH_TOP_V7 if version >= 7 else d.FETCH_TOP_V4,
             d.STRING_LENGTH, f"{len(encoded)}s", d.ARRAY_LENGTH,
             d.FETCH_PARTITION_V5 if version >= 5 else d.FETCH_PARTITION_V4,
             d.FETCH_RECORDS_V11 if version >= 11 else d.FETCH_RECORDS]
    layout = d.joined(*parts)
    _SINGLE[version, name] = found = (layout, encoded)
    return found


class FetchResponseFrame:
    """A whole Fetch response frame: ``topics`` is a list of ``(name, [PartitionData])``.

    ``size`` is the frame's length, size prefix included; ``write_into(view)`` writes it at
    the start of ``view`` (a writable memoryview of at least ``size`` bytes).
    """

    __slots__ = ("version", "correlation_id", "topics", "error_code", "session_id",
                 "read_committed", "size", "_fixed", "_slots", "_single")

    def __init__(self, version, correlation_id, topics, *, error_code=0, session_id=0,
                 read_committed=False):
        self.version = version
        self.correlation_id = correlation_id
        self.topics = topics
        self.error_code = error_code
        self.session_id = session_id
        self.read_committed = read_committed
        self._single = None
        if len(topics) == 1 and len(topics[0][1]) == 1 and not read_committed:
            name, (partition,) = topics[0]
            self._single = _SINGLE.get((version, name)) or _single(version, name)
            records = partition.records
            self.size = self._single[0].size + (records.size if records is not None else 0)
        else:
            per_partition = partition_overhead(version)
            size = frame_overhead(version)
            for name, partitions in topics:
                size += topic_overhead(name) + per_partition * len(partitions)
                for partition in partitions:
                    size += partition.records_size
                    if read_committed:
                        size += partition.aborted_size
            self.size = size
        self._fixed = None  # write_range_into's layout, made on its first call
        self._slots = None

    def write_into(self, view):
        """Write the frame at the start of ``view``; return its size."""
        if self._single is not None:
            return self._write_single(view)
        return self._write(view, None)

    def _write_single(self, view):
        """write_into for the one-partition answer (module doc)."""
        layout, encoded = self._single
        version = self.version
        (p,) = self.topics[0][1]
        records = p.records
        size = records.size if records is not None else 0
        args = [self.size - d.SIZE_PREFIX_LENGTH, self.correlation_id, 0]
        if version >= 7:
            args += (self.error_code, self.session_id)
        args += (1, len(encoded), encoded, 1, p.index, p.error_code, p.high_watermark,
                 p.last_stable_offset)
        if version >= 5:
            args.append(p.log_start_offset)
        args.append(d.NULL_LENGTH)
        if version >= 11:
            args.append(NO_PREFERRED_REPLICA)
        args.append(size)
        layout.pack_into(view, 0, *args)
        if size:
            records.read_into(view[layout.size:layout.size + size])
        return self.size

    def write_range_into(self, view, start):
        """Write the frame's bytes from ``start`` on into ``view`` (``len(view)`` of them):
        a response longer than a ring frame is written fragment by fragment this way
        (``shm_ring``'s try_write_filled), each partition's records read from its file
        straight into the fragment, never assembled first."""
        if self._fixed is None:
            self._slots = []
            records = sum(p.records_size for _, partitions in self.topics for p in partitions)
            self._fixed = bytearray(self.size - records)
            self._write(memoryview(self._fixed), self._slots)
        end = start + len(view)
        frame_at = fixed_at = 0  # the frame position where a run of fixed bytes begins
        fixed = self._fixed
        for slot_at, records in self._slots + [(self.size, None)]:
            low, high = max(start, frame_at), min(end, slot_at)
            if low < high:
                view[low - start:high - start] = fixed[fixed_at + low - frame_at:
                                                       fixed_at + high - frame_at]
            fixed_at += slot_at - frame_at
            if records is None:
                break
            frame_at = slot_at + records.size
            low, high = max(start, slot_at), min(end, frame_at)
            if low < high:
                records.read_range_into(view[low - start:high - start], low - slot_at)

    def _write(self, view, slots):
        """write_into; with ``slots`` (a list), the frame without its records: each
        partition's records are left out of ``view`` and ``(position in the frame, LogSlice)``
        appended to ``slots`` instead."""
        skipped = 0
        version = self.version
        d.RESPONSE_PREFIX.pack_into(view, 0, self.size - d.SIZE_PREFIX_LENGTH,
                                    self.correlation_id)
        position = d.RESPONSE_BODY_OFFSET
        if version >= 7:
            d.FETCH_TOP_V7.pack_into(view, position, 0, self.error_code, self.session_id,
                                     len(self.topics))
            position += d.FETCH_TOP_V7.size
        else:
            d.FETCH_TOP_V4.pack_into(view, position, 0, len(self.topics))
            position += d.FETCH_TOP_V4.size
        read_committed = self.read_committed
        aborted = d.NULL_LENGTH
        v5 = version >= 5
        v11 = version >= 11
        for name, partitions in self.topics:
            encoded = name.encode()
            d.STRING_LENGTH.pack_into(view, position, len(encoded))
            position += d.STRING_LENGTH.size
            view[position:position + len(encoded)] = encoded
            position += len(encoded)
            d.ARRAY_LENGTH.pack_into(view, position, len(partitions))
            position += d.ARRAY_LENGTH.size
            for p in partitions:
                if read_committed:
                    aborted = len(p.aborted_transactions)
                if v5:
                    d.FETCH_PARTITION_V5.pack_into(
                        view, position, p.index, p.error_code, p.high_watermark,
                        p.last_stable_offset, p.log_start_offset, aborted)
                    position += d.FETCH_PARTITION_V5.size
                else:
                    d.FETCH_PARTITION_V4.pack_into(
                        view, position, p.index, p.error_code, p.high_watermark,
                        p.last_stable_offset, aborted)
                    position += d.FETCH_PARTITION_V4.size
                if read_committed:
                    for txn in p.aborted_transactions:
                        d.FETCH_ABORTED.pack_into(view, position, txn.producer_id,
                                                  txn.first_offset)
                        position += d.FETCH_ABORTED.size
                size = p.records_size
                if v11:
                    d.FETCH_RECORDS_V11.pack_into(view, position, NO_PREFERRED_REPLICA, size)
                    position += d.FETCH_RECORDS_V11.size
                else:
                    d.FETCH_RECORDS.pack_into(view, position, size)
                    position += d.FETCH_RECORDS.size
                if size and slots is not None:
                    slots.append((position + skipped, p.records))
                    skipped += size
                elif size:
                    p.records.read_into(view[position:position + size])
                    position += size
        if position + skipped != self.size:
            raise AssertionError(f"fetch response wrote {position + skipped} bytes, sized "
                                 f"{self.size}")
        return position

    def tobytes(self):
        """The frame as a bytearray (when no ring slot can be claimed now)."""
        frame = bytearray(self.size)
        with memoryview(frame) as view:
            self.write_into(view)
        return frame
