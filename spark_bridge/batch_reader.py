"""``spark.read.format("ringlog")``: a batch read of fixed offset ranges.

``partitions()`` runs once, where Spark plans the query: it resolves ``startingOffsets``
(default earliest) and ``endingOffsets`` (default latest = each partition's high watermark
at planning time) for the partitions the strategy names, and splits the ranges by
``maxRecordsPerPartition`` and ``minPartitions`` (``offset_ranges.split_ranges``).
``read()`` runs in Spark's Python workers, one call per range
(``partition_reader.read_range``). The ranges are fixed when planned, so records committed
later are not read, and the same plan reads the same rows.

Spark pickles this reader to its workers; it holds only options and schemas.
"""
from __future__ import annotations

from pyspark.sql.datasource import DataSourceReader

from spark_bridge.arrow_rows import arrow_schema
from spark_bridge.offset_ranges import OffsetRange, split_ranges
from spark_bridge.offset_reader import OffsetReader
from spark_bridge.options import ENDING_OFFSETS, STARTING_OFFSETS, InvalidOptionError
from spark_bridge.partition_reader import read_range


class RinglogBatchReader(DataSourceReader):
    """Reads ``options`` (SourceOptions of a batch query) into rows of ``schema``."""

    def __init__(self, options, schema):
        self.options = options
        self.schema = schema

    def offset_ranges(self):
        """One OffsetRange per partition read, before any splitting.
        InvalidOptionError when ``endingOffsets`` names an offset past a partition's last
        committed record (the read could only wait for it); ValueError when a range would
        end before it starts (a start past the data, or a damaged topic)."""
        options = self.options
        with OffsetReader(options) as offsets:
            partitions = offsets.partitions()
            start = offsets.resolve(options.starting, partitions, STARTING_OFFSETS, exact=True)
            end = offsets.resolve(options.ending, partitions, ENDING_OFFSETS, exact=True)
            latest = end if options.ending == "latest" else offsets.latest(partitions)
        for tp in partitions:
            if end[tp] > latest[tp]:
                raise InvalidOptionError(
                    f"option '{ENDING_OFFSETS}': offset {end[tp]} of {tp.topic}-"
                    f"{tp.partition} is past its last committed record (high watermark "
                    f"{latest[tp]})")
        ranges = []
        for tp in partitions:
            if start[tp] > end[tp]:
                raise ValueError(
                    f"Beginning offset {start[tp]} is after the ending offset {end[tp]} for "
                    f"topic {tp.topic} partition {tp.partition}: '{STARTING_OFFSETS}' or "
                    f"'{ENDING_OFFSETS}' name offsets past the partition's data")
            ranges.append(OffsetRange(tp.topic, tp.partition, start[tp], end[tp]))
        return ranges

    def partitions(self):
        return split_ranges(self.offset_ranges(), self.options.min_partitions,
                            self.options.max_records_per_partition)

    def read(self, partition):
        # With no range at all, Spark still runs one task, with InputPartition(None).
        if not isinstance(partition, OffsetRange):
            return iter(())
        return read_range(self.options, partition, arrow_schema(self.schema))
