"""One Spark task's read: the records of one ``OffsetRange`` as Arrow record batches.

Runs in a Spark Python worker. It opens its own ``KafkaConsumer`` (no group), assigns the
one partition, seeks to ``from_offset`` and takes records with ``poll_batches`` — the
brokers' fetch path, which serves only committed records (below the high watermark) —
until the position reaches ``until_offset``; records at or past it are cut off, so the
same range always gives the same rows. Each ``RecordColumns`` run becomes one record
batch (``arrow_rows``), so the rows of one fetch response go to Spark together.

Missing records (``failOnDataLoss``, ``data_loss``):

* the start lies below the partition's log start offset (retention deleted it): the fetch
  fails with OFFSET_OUT_OF_RANGE; the records from the position up to the log start are
  reported lost (raise, or warn and go on from the log start);
* the high watermark fell below ``until_offset`` (records the plan counted are gone): what
  is missing is reported lost — checked whenever a poll of ``POLL_SLICE_MS`` brings
  nothing, so this is found within a second;
* nothing arrives for ``kafkaConsumer.pollTimeoutMs`` though the high watermark says the
  records exist: TimeoutError naming the partition and offsets.

The consumer is closed in a ``finally``: when the task ends, fails, or Spark stops reading
early (the generator is closed), so its connections' shared-memory rings are unlinked. A
worker killed outright leaves them to the brokers, which reap a dead client's connections.
"""
from __future__ import annotations

import time

import numpy as np

from cluster.errors import OffsetOutOfRangeError
from cluster.structs import TopicPartition
from spark_bridge.arrow_rows import record_batch
from spark_bridge.data_loss import report_data_loss
from spark_bridge.offset_reader import open_consumer

#: Bytes a fetch may bring per partition (the consumer's response ring is sized for it):
#: 4 MiB responses carry about 36,000 100-byte records, one Arrow batch each.
FETCH_BYTES = 4 * 1024 * 1024
#: Longest single poll (ms); after an empty one the high watermark is checked.
POLL_SLICE_MS = 1000


def read_range(options, offset_range, schema, clock=time.monotonic):
    """Yield the records of ``offset_range`` (an OffsetRange) as pa.RecordBatches of
    ``schema`` (the Arrow schema Spark expects), under ``options`` (SourceOptions);
    ``clock`` (monotonic seconds) times the poll timeout."""
    r = offset_range
    if r.from_offset >= r.until_offset:
        return
    tp = TopicPartition(r.topic, r.partition)
    until = r.until_offset
    consumer = open_consumer(options.bootstrap_servers, max_partition_fetch_bytes=FETCH_BYTES,
                             fetch_max_bytes=FETCH_BYTES,
                             default_api_timeout_ms=options.poll_timeout_ms,
                             isolation_level=options.isolation_level)
    try:
        consumer.assign([tp])
        position = r.from_offset
        consumer.seek(tp, position)
        slice_ms = min(POLL_SLICE_MS, options.poll_timeout_ms)
        last_records = clock()
        while position < until:
            try:
                runs = consumer.poll_batches(timeout_ms=slice_ms,
                                             max_records=until - position).get(tp, ())
            except OffsetOutOfRangeError:
                position = _skip_lost(consumer, tp, position, until, options)
                if position < until:
                    consumer.seek(tp, position)
                continue
            if not runs:
                # A fetch may have moved the position over offsets without records
                # (compacted away, or a transaction marker) and brought nothing else.
                position = consumer.position(tp)
                if position < until:
                    waited_ms = (clock() - last_records) * 1000
                    position = _nothing_came(consumer, tp, position, until, options,
                                             waited_ms)
                continue
            last_records = clock()
            for columns in runs:
                if columns.offsets[-1] >= until:
                    columns = columns.slice(0, int(np.searchsorted(columns.offsets, until)))
                if len(columns):
                    yield record_batch(columns, r.topic, r.partition, schema)
            position = consumer.position(tp)
    finally:
        consumer.close()


def _skip_lost(consumer, tp, position, until, options):
    """The fetch at ``position`` is out of range: report what is lost; the offset to go on
    from (``until`` when nothing of the range is left)."""
    earliest = consumer.beginning_offsets([tp])[tp]
    if position < earliest:
        report_data_loss(
            f"Cannot fetch offset {position} of {tp.topic}-{tp.partition}: records "
            f"{position} to {min(earliest, until) - 1} were deleted before they were read "
            f"(log start offset is now {earliest})", options.fail_on_data_loss)
        return min(earliest, until)
    latest = consumer.end_offsets([tp])[tp]
    report_data_loss(
        f"Cannot fetch offset {position} of {tp.topic}-{tp.partition}: it is past the high "
        f"watermark {latest}; records {max(latest, position)} to {until - 1} are gone",
        options.fail_on_data_loss)
    return until


def _nothing_came(consumer, tp, position, until, options, waited_ms):
    """A poll brought nothing, ``waited_ms`` after the last records: the offset to go on
    from — ``until`` when the high watermark fell below it (the loss reported), else
    ``position`` (poll again) — or TimeoutError once the poll timeout has passed."""
    latest = consumer.end_offsets([tp])[tp]
    if latest < until:
        report_data_loss(
            f"{tp.topic}-{tp.partition}: the high watermark is {latest}, below the planned "
            f"end {until}; records {max(latest, position)} to {until - 1} are gone",
            options.fail_on_data_loss)
        return until
    if waited_ms < options.poll_timeout_ms:
        return position
    raise TimeoutError(
        f"no records of {tp.topic}-{tp.partition} from offset {position} within "
        f"{options.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs), though the high "
        f"watermark is {latest}")
