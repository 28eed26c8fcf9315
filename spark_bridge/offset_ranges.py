"""Offset ranges: what one Spark task reads, and how a micro-batch's ranges are chosen.

``OffsetRange`` is the InputPartition this source hands to Spark: one topic partition,
records from ``from_offset`` up to (not including) ``until_offset``. Two pieces of Spark's
Kafka source planning, with its arithmetic:

* ``split_ranges`` (``KafkaOffsetRangeCalculator``): empty ranges are dropped; with
  ``maxRecordsPerPartition``, each range is first cut into ceil(size / max) even pieces, so
  no task reads more than that; then, with ``minPartitions`` larger than the number of
  ranges (pieces) left, big ones are cut into several tasks, each one's share of
  ``minPartitions`` proportional to its size (those whose share rounds to one stay whole
  and are left out of the proportion for the others). Cutting never makes a piece bigger,
  so the maximum holds after the second step too.
* ``rate_limit`` (``KafkaMicroBatchStream.rateLimit``): ``maxOffsetsPerTrigger`` records
  spread over the partitions in proportion to what each has waiting; a partition with a
  share below one record still gets one, so none starves.

Pure functions over ``{TopicPartition: offset}`` maps; any thread.
"""
from __future__ import annotations

import math

from pyspark.sql.datasource import InputPartition


class OffsetRange(InputPartition):
    """Records ``from_offset`` <= offset < ``until_offset`` of ``topic``-``partition``: one
    Spark task's input. An immutable value, pickled to Spark's Python workers."""

    def __init__(self, topic, partition, from_offset, until_offset):
        super().__init__((topic, partition, from_offset, until_offset))
        self.topic = topic
        self.partition = partition
        self.from_offset = from_offset
        self.until_offset = until_offset

    @property
    def size(self):
        """Offsets in the range (records, unless compaction left gaps)."""
        return self.until_offset - self.from_offset

    def __eq__(self, other):
        return isinstance(other, OffsetRange) and self.value == other.value

    def __hash__(self):
        return hash(self.value)

    def __repr__(self):
        return (f"OffsetRange({self.topic}-{self.partition}, {self.from_offset} to "
                f"{self.until_offset})")


def _round_half_up(x):
    """Scala's ``math.round`` (Java's Math.round): halves go up, unlike Python's round."""
    return math.floor(x + 0.5)


def _part_count(size, total, min_parts):
    return max(_round_half_up(size / total * min_parts), 1)


def _divide(r, parts):
    """OffsetRange ``r`` cut into ``parts`` pieces of even size, the last taking the
    rounding, empty pieces left out."""
    out = []
    remaining = r.size
    start = r.from_offset
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, r.until_offset)
        if end > start:
            out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return out


def split_ranges(ranges, min_partitions=None, max_records=None):
    """``ranges`` (OffsetRanges) as Spark tasks: empty ones dropped, each cut to at most
    ``max_records`` records, and big ones split further when ``min_partitions`` asks for
    more tasks than there are (module doc)."""
    ranges = [r for r in ranges if r.size > 0]
    if max_records is not None:
        ranges = [piece for r in ranges for piece in _divide(r, -(-r.size // max_records))]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    whole = [_part_count(r.size, total, min_partitions) == 1 for r in ranges]
    split_total = total - sum(r.size for r, stays in zip(ranges, whole) if stays)
    split_min = max(min_partitions - sum(whole), 1)
    return [piece for r, stays in zip(ranges, whole)
            for piece in _divide(r, 1 if stays else _part_count(r.size, split_total, split_min))]


def rate_limit(limit, start, latest, earliest_of_new):
    """The offsets to read up to in this micro-batch: ``latest`` ({TopicPartition:
    offset}), but at most ``limit`` records in all past ``start`` (partitions missing from
    ``start`` begin at ``earliest_of_new``), shared in proportion to what each partition has
    waiting (module doc)."""
    begins = {}
    sizes = {}
    for tp, end in latest.items():
        begin = start.get(tp, earliest_of_new.get(tp))
        if begin is not None and end - begin > 0:
            begins[tp] = begin
            sizes[tp] = end - begin
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        prorate = limit * (sizes[tp] / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, begins[tp] + share)
    return out
