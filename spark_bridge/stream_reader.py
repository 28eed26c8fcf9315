"""``spark.readStream.format("ringlog")``: micro-batches over offsets that only grow.

This source's offset is ``{"topic": {"partition": next_offset}}`` (``offsets``), the
offset of the next record to read in each partition, JSON with sorted keys. Spark stores
each micro-batch's end offset in its checkpoint before the batch runs, and on restart plans
the unfinished batch again from the same two offsets — which read the same records — so
with a checkpointed sink every record lands exactly once.

* ``initialOffset``: ``startingOffsets`` resolved (default latest; JSON may name some of
  the partitions, the rest start at their earliest offset as new partitions do), once per
  reader: Spark asks again when it runs the first micro-batch, and "latest" resolved anew
  would have moved on by then. (Spark's Kafka source keeps its initial offsets in the
  checkpoint, which a Python data source is not shown: a query restarted before its first
  micro-batch committed resolves "latest" again — the bridge pins it for that reason.)
* ``latestOffset(start, limit)``: the high watermarks of the partitions the strategy names
  now — new partitions and, with ``subscribePattern``, new topics show up here — held back
  by the read limit (``getDefaultReadLimit``: ``ReadMinRows`` from ``minOffsetsPerTrigger``,
  else ``ReadMaxRows`` from ``maxOffsetsPerTrigger``, else ``ReadAllAvailable``).
  ``ReadAllAvailable`` reads everything. Otherwise, as Spark's composite limit does: with
  a minimum, the trigger may wait (``trigger_delay``: fewer new offsets than the minimum and
  ``maxTriggerDelay`` not yet passed; the answer is then ``start``, and Spark runs no
  micro-batch); with a maximum, the records are spread over the partitions by
  ``offset_ranges.rate_limit``. PySpark's limits carry no delay and cannot be combined, so
  the minimum's delay, and whichever bound the limit handed in lacks, come from the options.
  Under ``Trigger.AvailableNow`` (``prepareForTriggerAvailableNow``) the high watermarks are
  taken once, at the first call, and never passed: the query ends when it has read them;
  no trigger waits for a minimum then (the records are all there is).
* ``partitions(start, end)``: one range per partition (new ones from their earliest
  offset), split by ``maxRecordsPerPartition`` and ``minPartitions``. Data loss
  (``data_loss``) is reported here: a start below the log start offset (retention deleted
  records before they were read; with ``failOnDataLoss=false`` the range starts at the log
  start instead), a partition that disappeared, an end below the start, a new partition
  that does not start at 0.
* ``read``: ``partition_reader.read_range`` in Spark's Python workers. ``commit``: nothing
  to do (the checkpoint is Spark's; ringlog keeps no consumer group for it).

Owner: Spark's streaming source runner, one call at a time. The driver-side consumer opens
on first use and closes in ``stop()``; pickled copies (sent to workers for ``read``) carry
no consumer.
"""
from __future__ import annotations

import logging

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from spark_bridge.arrow_rows import arrow_schema
from spark_bridge.data_loss import report_data_loss
from spark_bridge.offset_ranges import OffsetRange, rate_limit, split_ranges
from spark_bridge.offset_reader import OffsetReader
from spark_bridge.offsets import from_json_dict, to_json_dict
from spark_bridge.options import STARTING_OFFSETS
from spark_bridge.partition_reader import read_range
from spark_bridge.trigger_delay import TriggerDelay, wall_clock_ms

log = logging.getLogger("spark_bridge")


def _name(tp):
    return f"{tp.topic}-{tp.partition}"


class RinglogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streams ``options`` (SourceOptions of a streaming query) as rows of ``schema``.
    ``offsets`` (an OffsetReader by default) answers partitions and offsets; ``clock``
    (epoch ms) times ``maxTriggerDelay``."""

    def __init__(self, options, schema, offsets=None, clock=wall_clock_ms):
        self.options = options
        self.schema = schema
        self._offsets = offsets or OffsetReader(options)
        self._delay = TriggerDelay(options.max_trigger_delay_ms, clock)
        self._available_now = False
        self._target = None  # Trigger.AvailableNow: the high watermarks to read up to
        self._latest = None  # the high watermarks seen by the last latestOffset
        self._initial = None  # initialOffset's answer, once resolved

    # -- offsets ---------------------------------------------------------------------------

    def initialOffset(self):
        if self._initial is None:
            partitions = self._offsets.partitions()
            start = self._offsets.resolve(self.options.starting, partitions,
                                          STARTING_OFFSETS, exact=False)
            log.info("initial offsets of %s: %s", self.options.strategy, start)
            self._initial = to_json_dict(start)
        return self._initial

    def getDefaultReadLimit(self):
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self):
        self._available_now = True

    def _high_watermarks(self):
        if self._available_now:
            if self._target is None:
                self._target = self._offsets.latest(self._offsets.partitions())
            return self._target
        return self._offsets.latest(self._offsets.partitions())

    def latestOffset(self, start, limit):
        start = from_json_dict(start)
        latest = self._latest = self._high_watermarks()
        if isinstance(limit, ReadAllAvailable):
            return to_json_dict(latest)
        if not isinstance(limit, (ReadMinRows, ReadMaxRows)):
            raise ValueError(f"read limit {limit!r} is not supported by the ringlog source "
                             f"(only ReadAllAvailable, ReadMinRows and ReadMaxRows)")
        lower = (limit.min_rows if isinstance(limit, ReadMinRows) else
                 self.options.min_offsets_per_trigger)
        upper = (limit.max_rows if isinstance(limit, ReadMaxRows) else
                 self.options.max_offsets_per_trigger)
        if (lower is not None and not self._available_now
                and self._delay.waits(lower, start, latest)):
            return to_json_dict(start)
        if upper is not None:
            new = self._offsets.earliest(tp for tp in latest if tp not in start)
            latest = rate_limit(upper, start, latest, new)
        return to_json_dict(latest)

    def reportLatestOffset(self):
        return to_json_dict(self._latest) if self._latest else None

    # -- micro-batches ---------------------------------------------------------------------

    def offset_ranges(self, start, end):
        """One OffsetRange per partition of ``end`` between the two offsets (JSON dicts, as
        Spark hands them), data loss reported (module doc)."""
        fail = self.options.fail_on_data_loss
        start, end = from_json_dict(start), from_json_dict(end)
        gone = sorted(set(start) - set(end))
        if gone:
            report_data_loss(f"{', '.join(map(_name, gone))} are gone. Some data may have "
                             f"been missed", fail)
        new = self._offsets.earliest(tp for tp in end if tp not in start)
        for tp, offset in sorted(new.items()):
            if offset != 0:
                report_data_loss(f"Added partition {_name(tp)} starts from {offset} instead "
                                 f"of 0. Some data may have been missed", fail)
        begins = {**start, **new}
        earliest = self._offsets.earliest(tp for tp in end if tp in start)
        ranges = []
        for tp in sorted(end):
            begin, until = begins[tp], end[tp]
            if until < begin:
                report_data_loss(f"Partition {_name(tp)}'s offset was changed from {begin} "
                                 f"to {until}, some data may have been missed", fail)
                continue
            log_start = earliest.get(tp, begin)
            if begin < log_start and begin < until:
                report_data_loss(
                    f"Partition {_name(tp)}: records {begin} to {min(log_start, until) - 1} "
                    f"were deleted before they were read (log start offset is now "
                    f"{log_start})", fail)
                begin = min(log_start, until)
            ranges.append(OffsetRange(tp.topic, tp.partition, begin, until))
        return ranges

    def partitions(self, start, end):
        return split_ranges(self.offset_ranges(start, end), self.options.min_partitions,
                            self.options.max_records_per_partition)

    def read(self, partition):
        return read_range(self.options, partition, arrow_schema(self.schema))

    def commit(self, end):
        """Nothing to do: Spark's checkpoint holds the offsets."""

    def stop(self):
        self._offsets.close()
