"""Log compaction (cleanup.policy=compact): keep the last record of every key.

``clean(log)`` runs one pass over a ``PartitionLog`` whose policy includes ``compact``:

1. The *cleanable* range is the sealed segments — never the active one — up to the
   first segment that is still inside min.compaction.lag.ms (its largest timestamp is
   newer than ``now - min.compaction.lag.ms``) or that reaches the last stable offset
   (``last_stable_offset``; at most the first offset of the log's oldest open
   transaction). So every transaction in the range is decided, and the batches of an
   open one are never rewritten (Kafka's firstUncleanableOffset is the LSO itself; here
   the range stops at the segment holding it, since a segment is rewritten whole).
2. One read of that range learns the last offset of every key (checking each batch's
   CRC), what becomes of the transactions in it (``cleaned_txns``, fed with the aborted
   transactions of the ``.txnindex`` files overlapping the range) and estimates the
   size each segment will have once cleaned. Records of aborted transactions do not
   count as the last of their key.
3. The range is rewritten in groups of consecutive segments whose cleaned size is
   estimated to fit segment.bytes (Kafka groups by the sizes before cleaning, which
   leaves one small segment per source segment until a later pass); a lone segment
   the pass would not change is left alone. A record survives if it is the last one of
   its key in the range and not in an aborted transaction; a tombstone (null value)
   that is the last of its key survives only while its segment's largest timestamp is
   within delete.retention.ms of now, so consumers have that long to see the delete.
   Records without a key are dropped (Kafka refuses them on append to a compacted log,
   and drops them here).
4. Transaction markers (control batches) stay while their transaction may still be
   read. Once a pass meets none of its transaction's batches (``cleaned_txns``), a
   marker is stamped with a *delete horizon* (KIP-534: attributes bit 6 set, the
   horizon ``now + delete.retention.ms`` in baseTimestamp, each record's
   timestampDelta rebased so its timestamp is unchanged); the first pass after the
   horizon removes it. A consumer thus has delete.retention.ms to read past a marker
   whose transaction it saw begin. The marker of a producer whose state holds no data
   batch (the last thing it wrote is a marker, e.g. of a bumped epoch) stays whole:
   it carries the producer's latest epoch.
5. Every record keeps its offset: a surviving batch keeps its baseOffset,
   lastOffsetDelta, producer fields and its records' own bytes (so each record's
   offsetDelta, timestampDelta, key, value and headers are untouched); only recordCount,
   maxTimestamp and the CRC change, and a compressed batch is recompressed with its codec.
   A batch with no survivor disappears, leaving a gap in the offsets — unless it is the
   last batch of an idempotent or transactional producer (its last data offset in
   ``log.producer_state``): then its header stays, with no records (Kafka's
   RETAIN_EMPTY), so the producer's epoch and sequence survive compaction and a reopened
   log rebuilds its state.
6. Each group's output is written to ``<base>.log.cleaned`` (+ indexes, and a
   ``.txnindex`` holding the aborted transactions whose ABORT marker stays with records
   of theirs still in the pass — Kafka's cleaned transaction index), fsynced, and
   swapped in by ``PartitionLog.replace_segments`` (``.cleaned`` -> ``.swap`` -> final
   names), which a crash at any step leaves recoverable.

The tombstone rule uses segment timestamps, not the delete-horizon bit of KIP-534 that
markers get: the outcome is the same (a tombstone outlives delete.retention.ms). The key
map is a dict of the keys themselves (Kafka hashes keys into a fixed-size buffer): memory
grows with the number of distinct keys in the range.

The first offset not yet cleaned is kept in ``cleaner-offset-checkpoint``; a pass is
skipped while the dirty share of the cleanable bytes is below min.cleanable.dirty.ratio
(unless ``force``).

Thread safety: ``clean`` runs on the log's owning thread (the log has a single writer);
appends wait for it. It is not for the hot path.
"""
from __future__ import annotations

import dataclasses
import logging
import os

from crc32c import crc32c

from segments import index_descriptor as xd
from segments.checkpoint import OffsetCheckpoint
from segments.cleaned_txns import CleanedTransactions
from segments.errors import CorruptRecordError, KafkaStorageError
from segments.log_config import INT_MAX
from segments.record import batch_descriptor as bd
from segments.record.batch_header import BatchHeader
from segments.record.compression import compress, decompress, records_size_limit
from segments.record.varint import decode_varint, encode_varint
from segments.segment import CLEANED_SUFFIX, Segment, iter_file_batches, segment_paths

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"

#: What a pass does with a control batch: leave it, stamp its delete horizon, remove it.
KEEP, STAMP, DROP = "keep", "stamp", "drop"


@dataclasses.dataclass
class CleanerStats:
    """What one pass did."""

    segments_before: int = 0
    segments_after: int = 0
    #: Bytes of the segments rewritten, and of their replacements.
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    tombstones_removed: int = 0
    #: Records of aborted transactions removed.
    aborted_records_removed: int = 0
    #: Transaction markers stamped with a delete horizon, and removed past it.
    markers_stamped: int = 0
    markers_removed: int = 0
    #: First offset after the cleaned range (the new cleaner checkpoint).
    end_offset: int = 0


def clean(log_, last_stable_offset=None, force=False):
    """Compact ``log_`` once (see the module doc); return CleanerStats, or None when the
    policy is not ``compact``, nothing is cleanable, or the dirty ratio is too low.
    ``last_stable_offset``: the partition's LSO (the leader's or follower's, with the
    high watermark in it); None bounds the range by the log's open transactions only."""
    config = log_.config
    if not config.compact:
        return None
    now = log_.clock()
    bound = log_.producer_state.first_undecided_offset()
    if last_stable_offset is not None:
        bound = last_stable_offset if bound is None else min(bound, last_stable_offset)
    segments = _cleanable_segments(log_, now, bound)
    if not segments:
        return None
    end_offset = log_.segments[len(segments)].base_offset
    checkpoint = OffsetCheckpoint(os.path.join(log_.path, CLEANER_OFFSET_CHECKPOINT))
    first_dirty = _read_first_dirty(checkpoint, log_.name)
    total = sum(s.size for s in segments)
    dirty = sum(s.size for s in segments if s.base_offset >= first_dirty)
    if not force and (not total or dirty / total < config.min_cleanable_dirty_ratio):
        return None

    stats = CleanerStats(segments_before=len(segments), end_offset=end_offset)
    tombstone_horizon = now - config.delete_retention_ms
    txns = CleanedTransactions(log_.collect_aborted_transactions(segments[0].base_offset,
                                                                 end_offset))
    plan = _plan(segments, tombstone_horizon, txns, _ProducersLast(log_.producer_state),
                 now)
    last_offsets = {key: entry[0] for key, entry in plan.last.items()}
    for group in _group_by_size(segments, plan, config.segment_bytes, end_offset):
        first, last = group
        if first == last and not plan.changes(first):
            continue  # nothing to drop, stamp or merge: leave the segment alone
        _clean_group(log_, segments, range(first, last + 1), plan, last_offsets,
                     tombstone_horizon, now, stats)
    stats.segments_after = sum(1 for s in log_.segments if s.base_offset < end_offset)
    checkpoint.write({log_.name: end_offset})
    log.info("log %s: cleaned offsets below %d: %d -> %d segments, %d -> %d bytes, "
             "%d of %d records kept (%d of aborted transactions removed), %d markers "
             "stamped, %d removed", log_.path, end_offset, stats.segments_before,
             stats.segments_after, stats.bytes_read, stats.bytes_written,
             stats.records_retained, stats.records_read, stats.aborted_records_removed,
             stats.markers_stamped, stats.markers_removed)
    return stats


def _read_first_dirty(checkpoint, name):
    try:
        return checkpoint.read().get(name, 0)
    except KafkaStorageError as e:  # a bad checkpoint only costs a full pass
        log.warning("ignoring unreadable cleaner checkpoint: %s", e)
        return 0


def _cleanable_segments(log_, now, bound):
    """The sealed segments at the start of the log that compaction may rewrite: none
    reaching ``bound`` (an offset, or None)."""
    lag = log_.config.min_compaction_lag_ms
    cleanable = []
    for segment, following in zip(log_.segments, log_.segments[1:]):
        if bound is not None and following.base_offset > bound:
            break
        if lag and segment.largest_timestamp > now - lag:
            break
        cleanable.append(segment)
    return cleanable


def _group_by_size(segments, plan, max_bytes, end_offset):
    """``(first, last)`` index ranges of consecutive segments whose cleaned output is
    estimated to fit ``max_bytes`` (and whose sources fit an int32 position), and whose
    offsets fit one segment's indexes."""
    groups = []
    first = None
    estimate = size = 0
    for n, segment in enumerate(segments):
        upper = segments[n + 1].base_offset if n + 1 < len(segments) else end_offset
        if first is not None and (
                estimate + plan.estimates[n] > max_bytes or size + segment.size > INT_MAX
                or upper - 1 - segments[first].base_offset > xd.MAX_RELATIVE_OFFSET):
            groups.append((first, n - 1))
            first = None
        if first is None:
            first, estimate, size = n, 0, 0
        estimate += plan.estimates[n]
        size += segment.size
    if first is not None:
        groups.append((first, len(segments) - 1))
    return groups


def _iter_segment_batches(segment):
    """``(position, view, header)`` of each batch of a segment, CRC checked. The segment
    is pinned while the scan holds its descriptor (the caller writes a new segment
    meanwhile, whose files could otherwise make the file cache release this one)."""
    with segment.pinned():
        for position, view in iter_file_batches(segment.fd, 0, segment.size):
            header = BatchHeader(view)
            header.validate()
            yield position, view, header


class _ProducersLast:
    """What compaction keeps for the producers the log holds state for: the last data
    batch of each (``data``: producer id -> its last offset) and, for a producer whose
    state has no data batch, its markers of its current epoch (``epochs``)."""

    def __init__(self, producer_state):
        self.data = producer_state.last_data_offsets()
        self.epochs = {producer_id: entry.producer_epoch
                       for producer_id, entry in producer_state.producers.items()
                       if not entry.batches}

    def holds_data(self, header):
        return header.producer_id >= 0 and self.data.get(header.producer_id) == \
            header.last_offset

    def holds_marker(self, header):
        epoch = self.epochs.get(header.producer_id)
        return epoch is not None and epoch == header.producer_epoch


class _Plan:
    """What a pass will keep, learnt in one read of the cleanable segments.

    ``last``: key -> (offset, segment number, batch position, estimated bytes,
    tombstone) of the key's last record outside aborted transactions; ``records`` /
    ``retained``: records per segment now and after cleaning; ``estimates``: the
    estimated bytes of each cleaned segment (surviving records, scaled by their batch's
    compression ratio, plus a header per surviving batch and the control batches kept);
    ``aborted``: base offsets of the data batches of aborted transactions; ``markers``:
    base offset -> KEEP, STAMP or DROP for each control batch; ``rewrites``: batches per
    segment that change though no record goes (markers to stamp, emptied batches no
    longer kept); ``txn_entries``: per segment, the AbortedTxns its cleaned
    ``.txnindex`` keeps; ``producers``: the _ProducersLast.
    """

    def __init__(self, count, producers):
        self.last = {}
        self.records = [0] * count
        self.retained = [0] * count
        self.estimates = [0] * count
        self.aborted = set()
        self.markers = {}
        self.rewrites = [0] * count
        self.txn_entries = [[] for _ in range(count)]
        self.producers = producers

    def changes(self, n):
        """Whether cleaning segment ``n`` alone would change it."""
        return self.retained[n] != self.records[n] or self.rewrites[n] > 0


def _plan(segments, tombstone_horizon, txns, producers, now):
    plan = _Plan(len(segments), producers)
    for n, segment in enumerate(segments):
        for position, view, header in _iter_segment_batches(segment):
            if header.is_control_batch:
                discardable, entry = txns.on_control_batch(view, header)
                fate = _marker_fate(header, discardable, producers, now)
                plan.markers[header.base_offset] = fate
                plan.records[n] += header.record_count
                if entry is not None:
                    plan.txn_entries[n].append(entry)
                if fate != DROP:
                    plan.retained[n] += header.record_count
                    plan.estimates[n] += header.size_in_bytes
                    plan.rewrites[n] += fate == STAMP
                continue
            aborted = txns.on_data_batch(header)
            if aborted:
                plan.aborted.add(header.base_offset)
                plan.records[n] += header.record_count
            # no record of it stays (an empty batch: one a pass kept for its producer)
            if aborted or not header.record_count:
                if producers.holds_data(header):
                    plan.estimates[n] += bd.HEADER_SIZE
                elif not header.record_count:
                    plan.rewrites[n] += 1
                continue
            payload, records = _batch_records(view, header, segment.config.max_message_bytes)
            ratio = (header.size_in_bytes - bd.HEADER_SIZE) / len(payload) if payload else 1
            base = header.base_offset
            plan.records[n] += len(records)
            for start, end, offset_delta, _, key, tombstone in records:
                if key is not None:
                    plan.last[key] = (base + offset_delta, n, position,
                                      (end - start) * ratio, tombstone)
    drops_tombstones = [s.largest_timestamp < tombstone_horizon for s in segments]
    batches = set()
    for _, n, position, size, tombstone in plan.last.values():
        if tombstone and drops_tombstones[n]:
            continue
        plan.retained[n] += 1
        plan.estimates[n] += size
        if (n, position) not in batches:
            batches.add((n, position))
            plan.estimates[n] += bd.HEADER_SIZE
    return plan


def _marker_fate(header, discardable, producers, now):
    """KEEP, STAMP or DROP for the control batch ``header`` (module doc, step 4)."""
    if not discardable or (header.record_count and producers.holds_marker(header)):
        return KEEP
    if header.attributes & bd.DELETE_HORIZON_MASK:
        return DROP if header.base_timestamp <= now else KEEP
    return STAMP


def _clean_group(log_, segments, numbers, plan, last_offsets, tombstone_horizon, now, stats):
    """Rewrite ``segments[n] for n in numbers`` into one cleaned segment and swap it in;
    return it."""
    group = [segments[n] for n in numbers]
    base = group[0].base_offset
    for path in segment_paths(log_.path, base, CLEANED_SUFFIX):
        if os.path.exists(path):
            os.unlink(path)  # left by a pass that failed in this process
    cleaned = Segment.create(log_.path, base, log_.config, now, suffix=CLEANED_SUFFIX)
    horizon = now + log_.config.delete_retention_ms
    try:
        for n, segment in zip(numbers, group):
            drop_tombstones = segment.largest_timestamp < tombstone_horizon
            max_bytes = segment.config.max_message_bytes
            for _, view, header in _iter_segment_batches(segment):
                stats.bytes_read += header.size_in_bytes
                if header.is_control_batch:
                    batch = _control_batch(view, header, plan.markers[header.base_offset],
                                           horizon, stats, max_bytes)
                else:
                    batch = _filter_batch(view, header, last_offsets, plan,
                                          drop_tombstones, stats, max_bytes)
                if batch is not None:
                    filtered = BatchHeader(batch)
                    cleaned.append(batch, [(filtered.last_offset, filtered.max_timestamp,
                                            filtered.size_in_bytes)])
                    stats.bytes_written += filtered.size_in_bytes
            for txn in plan.txn_entries[n]:
                cleaned.txn_index.append(txn)
        log_.replace_segments(cleaned, group)
    except BaseException:
        if cleaned.suffix == CLEANED_SUFFIX:
            cleaned.delete()  # before the commit point: as if the pass never ran
        else:
            cleaned.close()  # committed: the next open completes the swap
        raise
    return cleaned


def _control_batch(view, header, fate, horizon, stats, max_record_bytes):
    """The control batch as the pass leaves it: ``view``, stamped with ``horizon`` (a new
    buffer), or None."""
    stats.records_read += header.record_count
    if fate == DROP:
        stats.markers_removed += 1
        return None
    stats.records_retained += header.record_count
    if fate == KEEP:
        return view
    stats.markers_stamped += 1
    payload, records = _batch_records(view, header, max_record_bytes)
    shift = header.base_timestamp - horizon
    data = b"".join(_rebased_record(payload, start, end, shift)
                    for start, end, *_ in records)
    return _pack(header, header.attributes | bd.DELETE_HORIZON_MASK, horizon,
                 header.max_timestamp, data, len(records))


def _rebased_record(payload, start, end, shift):
    """The record ``payload[start:end]`` with ``shift`` added to its timestampDelta (and
    its length prefix re-encoded)."""
    _, position = decode_varint(payload, start)
    attributes = payload[position:position + 1]
    timestamp_delta, after = decode_varint(payload, position + 1)
    body = attributes + encode_varint(timestamp_delta + shift) + payload[after:end]
    return encode_varint(len(body)) + body


def _filter_batch(view, header, last_offsets, plan, drop_tombstones, stats,
                  max_record_bytes):
    """The data batch with only its surviving records (bytes), the original view when all
    survive, or None when none does (its header alone when it is its producer's last
    batch: ``plan.producers``). A batch of an aborted transaction keeps no record."""
    base = header.base_offset
    aborted = base in plan.aborted
    if aborted:
        records = [None] * header.record_count
        stats.aborted_records_removed += header.record_count
    else:
        payload, records = _batch_records(view, header, max_record_bytes)
    kept = []
    max_timestamp = bd.NO_TIMESTAMP
    for record in () if aborted else records:
        start, end, offset_delta, timestamp_delta, key, tombstone = record
        if key is None or last_offsets.get(key) != base + offset_delta:
            continue
        if tombstone and drop_tombstones:
            stats.tombstones_removed += 1
            continue
        kept.append((start, end))
        max_timestamp = max(max_timestamp, header.base_timestamp + timestamp_delta)
    stats.records_read += len(records)
    stats.records_retained += len(kept)
    if kept and len(kept) == len(records):
        return view
    attributes = header.attributes
    if not kept:
        if not plan.producers.holds_data(header):
            return None
        if not records:
            return view  # its header alone already
        data = b""  # Kafka's writeEmptyHeader: no records, no compression
        attributes &= ~bd.COMPRESSION_CODEC_MASK
        max_timestamp = header.max_timestamp
    else:
        data = b"".join(payload[start:end] for start, end in kept)
    if header.timestamp_type == 1:
        max_timestamp = header.max_timestamp
    return _pack(header, attributes, header.base_timestamp, max_timestamp, data, len(kept))


def _pack(header, attributes, base_timestamp, max_timestamp, data, count):
    """A batch with ``header``'s offsets and producer fields around the records ``data``
    (compressed here with the batch's codec unless ``attributes`` say none)."""
    if attributes & bd.COMPRESSION_CODEC_MASK and count:
        data = compress(attributes & bd.COMPRESSION_CODEC_MASK, data)
    tail = bd.HEADER_AFTER_CRC.pack(
        attributes, header.last_offset_delta, base_timestamp, max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, count)
    crc = crc32c(data, crc32c(tail))
    out = bytearray(bd.HEADER_SIZE + len(data))
    bd.HEADER.pack_into(
        out, 0, header.base_offset, len(out) - bd.LOG_OVERHEAD,
        header.partition_leader_epoch, bd.MAGIC, crc, attributes, header.last_offset_delta,
        base_timestamp, max_timestamp, header.producer_id, header.producer_epoch,
        header.base_sequence, count)
    out[bd.HEADER_SIZE:] = data
    return out


def _batch_records(view, header, max_record_bytes):
    """The records payload of a batch (decompressed, to at most what its records may hold:
    ``records_size_limit`` with ``max_record_bytes``, the topic's max.message.bytes) and,
    per record, ``(start, end, offset_delta, timestamp_delta, key, is_tombstone)`` where
    ``payload[start:end]`` is the record's bytes, length varint included.

    Only what compaction needs is decoded (values are not copied).
    """
    payload = view[bd.RECORDS_OFFSET:header.size_in_bytes]
    if header.compression_type:
        payload = decompress(header.compression_type, payload,
                             records_size_limit(header.record_count, max_record_bytes),
                             header.base_offset)
    else:
        payload = bytes(payload)
    records = []
    position = 0
    end = len(payload)
    for index in range(header.record_count):
        try:
            start = position
            length, position = decode_varint(payload, position)
            record_end = position + length
            position += 1  # attributes
            timestamp_delta, position = decode_varint(payload, position)
            offset_delta, position = decode_varint(payload, position)
            key_length, position = decode_varint(payload, position)
            key = None
            if key_length >= 0:
                key = payload[position:position + key_length]
                position += key_length
            value_length, position = decode_varint(payload, position)
        except IndexError:
            raise CorruptRecordError(
                f"batch at offset {header.base_offset}: record {index} runs past the end "
                f"of its records ({end} bytes)") from None
        if record_end > end or record_end < position:
            raise CorruptRecordError(
                f"batch at offset {header.base_offset}: record {index} of length {length} "
                f"at {start} does not fit the records ({end} bytes)")
        position = record_end
        records.append((start, record_end, offset_delta, timestamp_delta, key,
                        value_length < 0))
    return payload, records
