"""One partition's records from one Fetch response, parsed as they are taken.

A Fetch response carries, per partition, whole batches as bytes. ``PartitionRecords``
keeps them as they came (no copy) and, when built, only walks the 61-byte batch headers
(``iter_batches``; its cost: perf/README.md, "Consumer record parsing"), which tells it the
offset after the last batch (``end_offset``: where the next fetch of this partition starts,
so it can be sent before these records are parsed — the fetcher's pipelining). Records are
parsed when the consumer takes them, a group of batches at a time (``columns_parser``:
vectorised for uniform batches), at least ``PARSE_GROUP_BYTES`` per group so the per-call
costs of the vectorised parse are shared by many records.

The broker answers a fetch at offset o with the whole batch holding o (it never splits a
batch), so the first records may lie before o: they are skipped. ``next_offset`` is the
offset of the next record to hand out; once everything is taken it is ``end_offset``,
which may be past the last record's offset + 1 (a compacted batch keeps its last offset
delta; a control batch has no records for the application).

read_committed: given the response's ``aborted_transactions``, the batches of aborted
transactions are dropped when the headers are walked, by Kafka's algorithm
(CompletedFetch.nextFetchedBatch): the aborted transactions sorted by first offset; at
each batch with a producer id, every aborted transaction that begins at or before the
batch's last offset makes its producer *aborted*; a transactional data batch of an
aborted producer is skipped, and that producer's ABORT marker (a control batch, itself
never handed out) makes it not aborted again. The position moves past what is skipped
(``end_offset`` counts every batch fetched). Without aborted transactions — every
read_uncommitted fetch, and read_committed ones with no abort in range — the headers
are not looked at again.

A batch that fails its CRC check (``check_crcs``) or does not decode raises
CorruptRecordError naming the partition and offset from ``take``/``take_columns`` — after
the records of the batches before it were taken; the object is then exhausted, and the
fetcher discards it (the position stays on the bad batch, as in kafka-python: seek past
it to go on). So does a batch whose baseOffset is not above the previous batch's last
offset: baseOffset sits outside the CRC, so a flip there would otherwise renumber records
silently (checked once per batch, when the headers are walked).

Owner: the consumer's thread (the fetcher makes it, the consumer's poll takes from it).
"""
from __future__ import annotations

import numpy as np

from consumer_proc.columns_parser import (
    COMPILED_WALK,
    VECTOR_MIN_RECORDS,
    parse_batches,
    parse_small,
)
from consumer_proc.consumer_record import make_record
from consumer_proc.record_columns import NO_HEADERS
from segments.errors import CorruptRecordError
from segments.record.batch_header import iter_batches
from segments.record.control_record import is_abort_marker
from segments.record.records import RecordBatch

#: Fewest bytes of batches parsed per group (unless the data ends first).
PARSE_GROUP_BYTES = 256 * 1024

#: Most records ``take`` decodes straight into ConsumerRecords when the compiled walk is
#: built (``_take_few``). A batch of n 100-byte records made and taken, CPU µs (min of 5
#: repeats, loaded 2-core machine, 2026-11-29): straight 12 / 15 / 18 / 23 for n = 1 / 2 /
#: 3 / 5, through the compiled columns 17 / 18 / 18 / 18 (20 records: 118 against 45).
STRAIGHT_MAX_COMPILED = 2


class PartitionRecords:
    """The batches fetched at ``fetch_offset`` for ``tp`` (a TopicPartition), as bytes
    (module doc). Raises CorruptRecordError if a batch header does not frame."""

    __slots__ = ("tp", "fetch_offset", "buffer", "next_offset", "end_offset", "size_in_bytes",
                 "batch_count", "_headers", "_next_batch", "_parsed", "_check_crcs", "_error",
                 "_renumbered")

    def __init__(self, tp, fetch_offset, buffer, check_crcs=True, aborted_transactions=None):
        self.tp = tp
        self.fetch_offset = fetch_offset
        self.buffer = buffer
        try:
            self._headers = list(iter_batches(buffer))
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{tp.topic}-{tp.partition} fetched at offset "
                                     f"{fetch_offset}: {exc}") from None
        #: The first batch whose offsets do not follow the previous batch's (module doc).
        self._renumbered = _first_renumbered(self._headers)
        valid = self._headers[:self._renumbered]
        self.next_offset = fetch_offset
        self.end_offset = valid[-1].next_offset if valid else fetch_offset
        self.size_in_bytes = (self._headers[-1].position + self._headers[-1].size_in_bytes
                              if self._headers else 0)
        #: Batches fetched (skipped ones included).
        self.batch_count = len(self._headers)
        if aborted_transactions:
            try:
                kept = _without_aborted(buffer, valid, aborted_transactions)
            except CorruptRecordError as exc:
                raise CorruptRecordError(f"{tp.topic}-{tp.partition} fetched at offset "
                                         f"{fetch_offset}: {exc}") from None
            self._headers = kept + self._headers[self._renumbered:]
            self._renumbered = len(kept)
        self._next_batch = 0
        self._parsed = []  # RecordColumns parsed and not yet (fully) taken, in order
        self._check_crcs = check_crcs
        self._error = None  # met while taking, raised by the next take

    def __bool__(self):
        """True while records (or batches not yet parsed, or an error) remain."""
        return (self._error is not None or bool(self._parsed)
                or self._next_batch < len(self._headers))

    @property
    def record_count(self):
        """Records in the fetched batches (those before ``fetch_offset`` included)."""
        return sum(header.record_count for header in self._headers)

    def _parse_more(self, wanted):
        """Parse the next group of batches (at least ``wanted`` records' worth when there are
        that many, and at least PARSE_GROUP_BYTES). A batch failing its CRC ends the group
        before it, so the records ahead of it are handed out first; it raises when it is
        the first of a group."""
        headers = self._headers
        first = last = self._next_batch
        records = size = 0
        while last < len(headers) and (records < wanted or size < PARSE_GROUP_BYTES):
            header = headers[last]
            try:
                if last == self._renumbered:
                    raise CorruptRecordError(
                        f"its offsets do not follow the previous batch's last offset "
                        f"{headers[last - 1].last_offset}")
                if self._check_crcs and header.compute_crc() != header.crc:
                    header.validate()  # framed by iter_batches: raises the CRC's error
            except CorruptRecordError as exc:
                if last > first:
                    break
                self._exhaust()
                raise CorruptRecordError(
                    f"{self.tp.topic}-{self.tp.partition}: batch at offset "
                    f"{header.base_offset}: {exc}") from None
            records += header.record_count
            size += header.size_in_bytes
            last += 1
        self._next_batch = last
        group = headers[first:last]
        parsed = parse_small(self.buffer, group)
        if parsed is None:
            try:
                parsed = parse_batches(self.buffer, group, check_crcs=False)
            except CorruptRecordError as exc:
                self._exhaust()
                raise CorruptRecordError(
                    f"{self.tp.topic}-{self.tp.partition}: batches from offset "
                    f"{headers[first].base_offset}: {exc}") from None
        search = group[0].base_offset < self.next_offset  # records before the fetch offset
        for columns in parsed:
            skip = int(np.searchsorted(columns.offsets, self.next_offset)) if search else 0
            if skip < len(columns):
                self._parsed.append(columns.slice(skip, len(columns)) if skip else columns)

    def _exhaust(self):
        self._next_batch = len(self._headers)
        self._parsed.clear()

    def take_columns(self, max_records):
        """Up to ``max_records`` next records as a list of RecordColumns; advances
        ``next_offset``. Raises CorruptRecordError (module doc)."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        out = []
        remaining = max_records
        parsed = self._parsed
        while remaining > 0:
            if not parsed:
                if self._next_batch == len(self._headers):
                    break
                try:
                    self._parse_more(remaining)
                except CorruptRecordError as exc:
                    if not out:
                        raise
                    self._error = exc  # hand out what came before it first
                    break
                continue
            columns = parsed[0]
            count = len(columns)
            if count <= remaining:
                parsed.pop(0)
                out.append(columns)
                remaining -= count
            else:
                out.append(columns.slice(0, remaining))
                parsed[0] = columns.slice(remaining, count)
                remaining = 0
            self.next_offset = int(out[-1].offsets[-1]) + 1
        if not parsed and self._next_batch == len(self._headers) and self._error is None:
            self.next_offset = self.end_offset
        return out

    def take(self, max_records, key_deserializer=None, value_deserializer=None):
        """Up to ``max_records`` next records as ConsumerRecords (deserializers as in
        ``RecordColumns.to_records``); advances ``next_offset``."""
        if not self._parsed and self._error is None:
            records = self._take_few(max_records, key_deserializer, value_deserializer)
            if records is not None:
                return records
        runs = self.take_columns(max_records)
        topic, partition = self.tp
        records = []
        for columns in runs:
            records += columns.to_records(topic, partition, key_deserializer,
                                          value_deserializer)
        return records

    def _take_few(self, max_records, key_deserializer, value_deserializer):
        """Every record left, decoded straight into ConsumerRecords — when the batches left
        hold fewer than ``VECTOR_MIN_RECORDS`` records, at most ``max_records``, none
        compressed and every CRC good; None otherwise (``take`` then goes through the
        columns). A consumer that keeps up with its producer gets a record or two per
        fetch: building them without numpy arrays is faster for a one-record response
        (PartitionRecords made and taken) than going through RecordColumns (figures:
        perf/README.md, "Small fetches decoded without numpy"). With the compiled walk
        (``columns_parser.COMPILED_WALK``) the columns path wins from 3 records on, so only
        ``STRAIGHT_MAX_COMPILED`` records or fewer are taken straight."""
        headers = self._headers[self._next_batch:]
        most = STRAIGHT_MAX_COMPILED if COMPILED_WALK else VECTOR_MIN_RECORDS - 1
        if not headers or self._renumbered < len(self._headers) or sum(
                h.record_count for h in headers) > min(max_records, most):
            return None
        for header in headers:
            if header.compression_type:
                return None
            if self._check_crcs:
                try:
                    header.validate()
                except CorruptRecordError:
                    return None  # the columns path hands out what precedes it, then raises
        topic, partition = self.tp
        next_offset = self.next_offset
        buffer = self.buffer
        try:
            decoded = [(header.partition_leader_epoch, list(RecordBatch(buffer, header.position)))
                       for header in headers
                       if not header.is_control_batch and header.record_count]
        except CorruptRecordError:
            return None  # the columns path names the partition and gives up on it
        out = []
        for epoch, records in decoded:
            for offset, timestamp, timestamp_type, key, value, record_headers in records:
                if offset < next_offset:
                    continue
                if record_headers:
                    header_size = sum(len(k.encode()) + (0 if v is None else len(v))
                                      for k, v in record_headers)
                else:
                    record_headers, header_size = NO_HEADERS, -1
                out.append(make_record((
                    topic, partition, epoch, offset, timestamp, timestamp_type,
                    key if key_deserializer is None else key_deserializer(
                        topic, record_headers, key),
                    value if value_deserializer is None else value_deserializer(
                        topic, record_headers, value),
                    record_headers, None, -1 if key is None else len(key),
                    -1 if value is None else len(value), header_size)))
        self._next_batch = len(self._headers)
        self.next_offset = self.end_offset
        return out

    def __repr__(self):
        return (f"PartitionRecords({self.tp.topic}-{self.tp.partition}, fetched at "
                f"{self.fetch_offset}, next {self.next_offset}, end {self.end_offset}, "
                f"{len(self._headers)} batches)")


def _without_aborted(buffer, headers, aborted_transactions):
    """``headers`` without the batches of aborted transactions and without control
    batches (module doc). ``aborted_transactions``: objects with ``producer_id`` and
    ``first_offset``."""
    pending = sorted(aborted_transactions, key=lambda txn: txn.first_offset)
    next_pending = 0
    aborted = set()
    kept = []
    for header in headers:
        producer_id = header.producer_id
        if producer_id >= 0:
            last_offset = header.last_offset
            while (next_pending < len(pending)
                   and pending[next_pending].first_offset <= last_offset):
                aborted.add(pending[next_pending].producer_id)
                next_pending += 1
            if header.is_control_batch:
                if is_abort_marker(buffer, header):
                    aborted.discard(producer_id)
                continue
            if header.is_transactional and producer_id in aborted:
                continue
        elif header.is_control_batch:
            continue
        kept.append(header)
    return kept


def _first_renumbered(headers):
    """The index of the first batch whose baseOffset is not above the previous batch's last
    offset, or ``len(headers)`` when offsets strictly increase (one comparison a batch)."""
    for n in range(1, len(headers)):
        if headers[n].base_offset <= headers[n - 1].last_offset:
            return n
    return len(headers)
