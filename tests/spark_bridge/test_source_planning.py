"""The ringlog source's planning and row building without Spark or a cluster: offsets JSON
(spark_bridge.offsets), minPartitions and maxRecordsPerPartition splitting and
maxOffsetsPerTrigger rate limiting with Spark's arithmetic (offset_ranges; expected values
from Spark's KafkaOffsetRangeCalculatorSuite and KafkaMicroBatchStream.rateLimit),
minOffsetsPerTrigger with maxTriggerDelay (trigger_delay, and the stream reader's
latestOffset over a fake offset reader and a fake clock), RecordColumns turned into
Arrow batches (arrow_rows) for every key/value shape, and the timestamp options resolved
(offset_reader with timestamp_offsets, over a fake consumer's ListOffsets answers)."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from cluster.structs import OffsetAndTimestamp, TopicPartition
from consumer_proc.record_columns import RecordColumns
from spark_bridge.arrow_rows import arrow_schema, binary_from_positions, record_batch
from spark_bridge.offset_ranges import OffsetRange, rate_limit, split_ranges
from spark_bridge.offset_reader import OffsetReader
from spark_bridge.offsets import (
    OffsetsFormatError,
    from_json_dict,
    parse_partition_offsets,
    parse_partitions,
    to_json_dict,
)
from spark_bridge.options import InvalidOptionError, parse_batch_options, parse_stream_options
from spark_bridge.source import ringlog_schema
from spark_bridge.stream_reader import RinglogStreamReader
from spark_bridge.timestamp_offsets import ByTimestamp, NoMatchingOffsetError
from spark_bridge.trigger_delay import TriggerDelay
from tests.support.clock import T0, FakeClock

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
A10 = TopicPartition("a", 10)


# -- offsets JSON -------------------------------------------------------------------------------

def test_offsets_json_is_deterministic_and_sorted_by_partition_number():
    offsets = {A10: 5, B0: 1, A1: 7, A0: 3}
    as_dict = to_json_dict(offsets)
    assert json.dumps(as_dict) == '{"a": {"0": 3, "1": 7, "10": 5}, "b": {"0": 1}}'
    assert json.dumps(to_json_dict(dict(reversed(list(offsets.items()))))) == \
        json.dumps(as_dict)
    assert from_json_dict(json.loads(json.dumps(as_dict))) == offsets


def test_spark_offset_and_partition_json():
    assert parse_partition_offsets('{"a":{"0":23,"1":-2},"b":{"0":-1}}') == \
        {A0: 23, A1: -2, B0: -1}
    assert parse_partitions('{"b":[0],"a":[1,0,1]}') == [A0, A1, B0]
    for bad in ('[1]', '{"a":[0]}', '{"a":{"0":1.5}}', '{"a":{"0":true}}', 'nope'):
        with pytest.raises(OffsetsFormatError, match="Expected e.g."):
            parse_partition_offsets(bad)
    for bad in ('{"a":{"0":1}}', '{"a":[0,"1"]}', '[]'):
        with pytest.raises(OffsetsFormatError, match="Expected e.g."):
            parse_partitions(bad)


# -- minPartitions (KafkaOffsetRangeCalculatorSuite) --------------------------------------------

def ranges(*specs):
    return [OffsetRange(tp.topic, tp.partition, start, end) for tp, start, end in specs]


def test_without_min_partitions_one_task_per_non_empty_range():
    assert split_ranges(ranges((A0, 1, 2), (A1, 3, 3))) == ranges((A0, 1, 2))
    assert split_ranges(ranges((A0, 1, 5), (A1, 1, 3)), 2) == ranges((A0, 1, 5), (A1, 1, 3))


def test_one_range_split_evenly_the_last_part_taking_the_rest():
    assert split_ranges(ranges((A0, 1, 5)), 4) == ranges((A0, 1, 2), (A0, 2, 3), (A0, 3, 4),
                                                         (A0, 4, 5))
    assert split_ranges(ranges((A0, 1, 5)), 3) == ranges((A0, 1, 2), (A0, 2, 3), (A0, 3, 5))


def test_small_ranges_stay_whole_and_big_ones_share_the_rest():
    got = split_ranges(ranges((A0, 1, 5), (A1, 1, 21), (B0, 1, 1)), 4)
    assert got == ranges((A0, 1, 5), (A1, 1, 7), (A1, 7, 14), (A1, 14, 21))


def test_splits_cover_the_range_exactly():
    got = split_ranges(ranges((A0, 100, 1_000_100), (A1, 0, 333)), 7)
    for tp in (A0, A1):
        parts = [r for r in got if (r.topic, r.partition) == tp]
        assert parts[0].from_offset == (100 if tp == A0 else 0)
        assert all(p.until_offset == q.from_offset for p, q in zip(parts, parts[1:]))
        assert parts[-1].until_offset == (1_000_100 if tp == A0 else 333)
    assert len(got) >= 7


# -- maxRecordsPerPartition ---------------------------------------------------------------------

def test_max_records_cuts_each_range_into_even_pieces_at_most_that_big():
    got = split_ranges(ranges((A0, 0, 10), (A1, 5, 8), (B0, 4, 4)), max_records=4)
    assert got == ranges((A0, 0, 3), (A0, 3, 6), (A0, 6, 10), (A1, 5, 8))
    assert split_ranges(ranges((A0, 0, 8)), max_records=4) == ranges((A0, 0, 4), (A0, 4, 8))


def test_min_partitions_applies_after_max_records():
    # 2 pieces of 4 after the maximum, fewer than 4 tasks: each piece is cut in two
    got = split_ranges(ranges((A0, 0, 8)), min_partitions=4, max_records=4)
    assert got == ranges((A0, 0, 2), (A0, 2, 4), (A0, 4, 6), (A0, 6, 8))
    # enough pieces already: min_partitions changes nothing
    assert split_ranges(ranges((A0, 0, 9)), min_partitions=2, max_records=3) == \
        ranges((A0, 0, 3), (A0, 3, 6), (A0, 6, 9))


@pytest.mark.parametrize("max_records", [1, 7, 100, 999])
@pytest.mark.parametrize("min_partitions", [None, 3, 40])
def test_max_records_holds_and_the_pieces_cover_every_range(max_records, min_partitions):
    given = ranges((A0, 100, 1_100), (A1, 0, 333), (B0, 9, 10))
    got = split_ranges(given, min_partitions, max_records)
    assert max(r.size for r in got) <= max_records
    for whole in given:
        parts = [r for r in got if (r.topic, r.partition) == (whole.topic, whole.partition)]
        assert parts[0].from_offset == whole.from_offset
        assert all(p.until_offset == q.from_offset for p, q in zip(parts, parts[1:]))
        assert parts[-1].until_offset == whole.until_offset


def test_offset_range_pickles_as_spark_input_partition():
    r = OffsetRange("a", 3, 10, 20)
    assert pickle.loads(pickle.dumps(r)) == r
    assert r.value == ("a", 3, 10, 20) and r.size == 10


# -- maxOffsetsPerTrigger (rateLimit) -----------------------------------------------------------

def test_rate_limit_prorates_and_never_starves_a_partition():
    got = rate_limit(10, {A0: 0, A1: 0}, {A0: 100, A1: 1}, {})
    assert got == {A0: 9, A1: 1}


def test_rate_limit_new_partitions_start_from_earliest():
    got = rate_limit(30, {A0: 0}, {A0: 60, B0: 40}, {B0: 10})
    assert got == {A0: 20, B0: 20}


def test_rate_limit_with_room_for_everything_or_nothing_waiting():
    assert rate_limit(1000, {A0: 5}, {A0: 50}, {}) == {A0: 50}
    assert rate_limit(10, {A0: 50, A1: 7}, {A0: 50, A1: 7}, {}) == {A0: 50, A1: 7}


# -- minOffsetsPerTrigger and maxTriggerDelay (delayBatch) -------------------------------------

def test_trigger_waits_for_the_minimum_until_the_delay_has_passed():
    clock = FakeClock(T0)
    delay = TriggerDelay(60_000, clock)
    assert not delay.waits(100, {A0: 0}, {A0: 5})  # the first trigger never waits
    clock.advance(1_000)
    assert delay.waits(100, {A0: 5}, {A0: 50, A1: 40})  # 45 + 40 (new: from 0) < 100
    assert not delay.waits(100, {A0: 5}, {A0: 50, A1: 60})  # 105 waiting: runs
    clock.advance(59_999)
    assert delay.waits(100, {A0: 50}, {A0: 51})  # just under the delay since that one
    clock.advance(1)
    assert not delay.waits(100, {A0: 50}, {A0: 51})  # the delay has passed
    assert delay.waits(100, {A0: 51}, {A0: 51})  # and counts again from there


class FakeOffsets:
    """An OffsetReader's answers from dicts: ``latest`` high watermarks, ``log_start``."""

    def __init__(self, latest, log_start=None):
        self.high_watermarks = dict(latest)
        self.log_start = log_start or {}

    def partitions(self):
        return sorted(self.high_watermarks)

    def latest(self, partitions):
        return {tp: self.high_watermarks[tp] for tp in partitions}

    def earliest(self, partitions):
        return {tp: self.log_start.get(tp, 0) for tp in partitions}


def stream_reader(offsets, clock, **options):
    parsed = parse_stream_options({"bootstrap.servers": "/d", "subscribe": "a", **options})
    return RinglogStreamReader(parsed, ringlog_schema(False), offsets=offsets, clock=clock)


def test_default_read_limit_carries_the_minimum_else_the_maximum():
    offsets, clock = FakeOffsets({}), FakeClock(T0)
    assert stream_reader(offsets, clock).getDefaultReadLimit() == ReadAllAvailable()
    assert stream_reader(offsets, clock, maxOffsetsPerTrigger="9").getDefaultReadLimit() == \
        ReadMaxRows(9)
    assert stream_reader(offsets, clock, minOffsetsPerTrigger="3",
                         maxOffsetsPerTrigger="9").getDefaultReadLimit() == ReadMinRows(3)


def test_latest_offset_holds_a_trigger_back_until_enough_records_or_the_delay():
    offsets, clock = FakeOffsets({A0: 30, A1: 0}), FakeClock(T0)
    reader = stream_reader(offsets, clock, minOffsetsPerTrigger="100",
                           maxOffsetsPerTrigger="150", maxTriggerDelay="10s")
    limit = reader.getDefaultReadLimit()
    start = to_json_dict({A0: 0, A1: 0})
    assert reader.latestOffset(start, limit) == to_json_dict({A0: 30, A1: 0})  # first: runs
    start = to_json_dict({A0: 30, A1: 0})
    offsets.high_watermarks = {A0: 80, A1: 40}  # 90 new: fewer than 100
    clock.advance(9_999)
    assert reader.latestOffset(start, limit) == start  # Spark runs no micro-batch
    offsets.high_watermarks = {A0: 200, A1: 130}  # 300 new: runs, at most 150 of them
    assert reader.latestOffset(start, limit) == to_json_dict({A0: 30 + 85, A1: 65})
    start = to_json_dict({A0: 115, A1: 65})
    offsets.high_watermarks = {A0: 116, A1: 65}
    clock.advance(9_999)
    assert reader.latestOffset(start, limit) == start
    clock.advance(1)  # 10 s since the last trigger that ran: runs with what there is
    assert reader.latestOffset(start, limit) == to_json_dict({A0: 116, A1: 65})
    # Trigger.Once and the like: everything, whatever the options
    offsets.high_watermarks = {A0: 120, A1: 65}
    assert reader.latestOffset(start, ReadAllAvailable()) == to_json_dict({A0: 120, A1: 65})


def test_available_now_never_waits_for_the_minimum():
    offsets, clock = FakeOffsets({A0: 10}), FakeClock(T0)
    reader = stream_reader(offsets, clock, minOffsetsPerTrigger="100", maxTriggerDelay="1h")
    reader.prepareForTriggerAvailableNow()
    limit = reader.getDefaultReadLimit()
    assert reader.latestOffset(to_json_dict({A0: 0}), limit) == to_json_dict({A0: 10})
    offsets.high_watermarks = {A0: 20}  # after the target: not read
    assert reader.latestOffset(to_json_dict({A0: 10}), limit) == to_json_dict({A0: 10})


# -- Arrow rows ---------------------------------------------------------------------------------

def positional(values, keys=None, pad=b"#"):
    """RecordColumns whose keys and values lie in one buffer between ``pad`` bytes, as the
    consumer's vectorised parse leaves them."""
    buf = bytearray(b"HEAD")
    key_starts, value_starts, key_lengths, value_lengths = [], [], [], []
    keys = keys if keys is not None else [None] * len(values)
    for key, value in zip(keys, values):
        for data, starts, lengths in ((key, key_starts, key_lengths),
                                      (value, value_starts, value_lengths)):
            buf += pad * 3
            starts.append(len(buf))
            lengths.append(-1 if data is None else len(data))
            buf += data or b""
    n = len(values)
    return RecordColumns(
        0, 0, np.arange(100, 100 + n, dtype=np.int64),
        np.arange(1_700_000_000_000, 1_700_000_000_000 + n, dtype=np.int64),
        np.array(key_lengths, dtype=np.int64), np.array(value_lengths, dtype=np.int64),
        buffer=bytes(buf), key_starts=np.array(key_starts, dtype=np.int64),
        value_starts=np.array(value_starts, dtype=np.int64))


SHAPES = {
    "one size, long": [b"x" * 100 + bytes([i]) for i in range(50)],
    "inline, varying": [b"v%d" % i for i in range(50)],
    "mixed with nulls and empties": [None, b"", b"a" * 12, b"b" * 13, None, b"c" * 300, b"z"],
    "all null": [None, None, None],
    "empty": [],
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_binary_from_positions_matches_the_values(shape):
    values = SHAPES[shape]
    columns = positional(values)
    array = binary_from_positions(columns.buffer, columns.value_starts, columns.value_lengths)
    assert array.type == pa.binary()
    assert array.to_pylist() == values


def test_binary_from_positions_at_the_very_end_of_the_buffer():
    buf = b"....abc"
    array = binary_from_positions(buf, np.array([4, 6]), np.array([3, 1]))
    assert array.to_pylist() == [b"abc", b"c"]


@pytest.mark.parametrize("include_headers", [False, True])
def test_record_batch_has_sparks_schema_and_the_records(include_headers):
    schema = arrow_schema(ringlog_schema(include_headers))
    values = [b"value-%03d" % i for i in range(20)]
    keys = [None if i % 3 == 0 else b"key%d" % i for i in range(20)]
    batch = record_batch(positional(values, keys), "logs", 7, schema)
    assert batch.schema.equals(schema)
    rows = batch.to_pydict()
    assert rows["key"] == keys and rows["value"] == values
    assert rows["topic"] == ["logs"] * 20 and rows["partition"] == [7] * 20
    assert rows["offset"] == list(range(100, 120))
    assert [t.timestamp() * 1000 for t in rows["timestamp"]] == \
        [1_700_000_000_000 + i for i in range(20)]
    assert rows["timestampType"] == [0] * 20
    if include_headers:
        assert rows["headers"] == [None] * 20


def test_record_batch_from_decoded_records_with_headers():
    schema = arrow_schema(ringlog_schema(True))
    records = [(5, 1000, 1, b"k", b"v1", [("a", b"1"), ("b", None)]),
               (6, 1001, 1, None, None, [])]
    columns = RecordColumns.from_records(3, 1, records)
    rows = record_batch(columns, "t", 0, schema).to_pydict()
    assert rows["key"] == [b"k", None] and rows["value"] == [b"v1", None]
    assert rows["timestampType"] == [1, 1]
    assert rows["headers"] == [[{"key": "a", "value": b"1"}, {"key": "b", "value": None}],
                               None]


# -- offsets by timestamp (offset_reader with timestamp_offsets) -------------------------------

class FakeTimeConsumer:
    """A KafkaConsumer's ListOffsets answers: each partition's records' timestamps
    (``stamps``: {TopicPartition: [ms by offset]}) and high watermarks = len(stamps); the
    ListOffsets asked for by timestamp recorded in ``asked``."""

    def __init__(self, stamps):
        self.stamps = stamps
        self.asked = []
        self.closed = False

    def offsets_for_times(self, timestamps):
        self.asked.append(dict(timestamps))
        found = {}
        for tp, ts in timestamps.items():
            offset = next((o for o, stamp in enumerate(self.stamps[tp]) if stamp >= ts), None)
            found[tp] = None if offset is None else OffsetAndTimestamp(
                offset, self.stamps[tp][offset], -1)
        return found

    def end_offsets(self, partitions):
        return {tp: len(self.stamps[tp]) for tp in partitions}

    def partitions_for_topic(self, topic):
        return {tp.partition for tp in self.stamps if tp.topic == topic}

    def beginning_offsets(self, partitions):
        return {tp: 0 for tp in partitions}

    def close(self):
        self.closed = True


STAMPS = {A0: [100, 200, 300, 400], A1: [150, 250]}


def time_reader(options=None):
    options = options or parse_batch_options({"bootstrap.servers": "/d", "subscribe": "a"})
    consumer = FakeTimeConsumer(STAMPS)
    return OffsetReader(options, consumer), consumer


def test_one_timestamp_is_looked_up_for_every_partition():
    offsets, consumer = time_reader()
    assert offsets.resolve(ByTimestamp(200), [A0, A1], "startingTimestamp", exact=True) == \
        {A0: 1, A1: 1}
    assert consumer.asked == [{A0: 200, A1: 200}]
    assert offsets.resolve(ByTimestamp(0), [A0, A1], "startingTimestamp", exact=False) == \
        {A0: 0, A1: 0}


def test_timestamps_by_partition_must_name_every_partition_read():
    offsets, _ = time_reader()
    assert offsets.resolve(ByTimestamp({A0: 301, A1: 1}), [A0, A1],
                           "startingOffsetsByTimestamp", exact=False) == {A0: 3, A1: 0}
    for named in ({A0: 1}, {A0: 1, A1: 1, B0: 1}):
        with pytest.raises(InvalidOptionError,
                           match=r"'startingOffsetsByTimestamp' names partitions .* name every"):
            offsets.resolve(ByTimestamp(named), [A0, A1], "startingOffsetsByTimestamp",
                            exact=False)


def test_no_record_at_or_after_a_starting_timestamp_fails_naming_it_by_default():
    offsets, _ = time_reader()
    with pytest.raises(NoMatchingOffsetError,
                       match="No offset matched from request of topic-partition a-1 and "
                             "timestamp 300"):
        offsets.resolve(ByTimestamp(300), [A0, A1], "startingTimestamp", exact=True)


def test_under_strategy_latest_or_when_ending_no_match_is_the_latest_offset():
    offsets, _ = time_reader()
    for spec in (ByTimestamp(300, "latest"), ByTimestamp({A0: 300, A1: 300}, "latest")):
        assert offsets.resolve(spec, [A0, A1], "x", exact=True) == {A0: 2, A1: 2}
    assert offsets.resolve(ByTimestamp(500, "latest"), [A0, A1], "x", exact=True) == \
        {A0: 4, A1: 2}


def test_timestamp_options_parsed_then_resolved_by_precedence():
    options = parse_batch_options({
        "bootstrap.servers": "/d", "subscribe": "a", "startingOffsetsByTimestamp": '{"a":{"0":1}}'})
    with pytest.raises(InvalidOptionError, match="'startingOffsetsByTimestamp' names"):
        time_reader(options)[0].resolve(options.starting, [A0, A1], "startingOffsets", True)
    options = parse_batch_options({
        "bootstrap.servers": "/d", "subscribe": "a", "startingOffsets": '{"a":{"0":0,"1":0}}',
        "startingOffsetsByTimestamp": '{"a":{"0":250,"1":250}}', "endingTimestamp": "350",
        "endingOffsetsByTimestamp": '{"a":{"0":100,"1":100}}'})
    offsets, consumer = time_reader(options)
    with offsets:
        start = offsets.resolve(options.starting, [A0, A1], "startingOffsets", exact=True)
        end = offsets.resolve(options.ending, [A0, A1], "endingOffsets", exact=True)
    assert (start, end) == ({A0: 2, A1: 1}, {A0: 3, A1: 2})
    assert consumer.asked == [{A0: 250, A1: 250}, {A0: 350, A1: 350}] and consumer.closed



def test_a_stream_starts_at_the_offsets_of_its_starting_timestamp():
    options = parse_stream_options({"bootstrap.servers": "/d", "subscribe": "a",
                                    "startingTimestamp": "260",
                                    "startingOffsetsByTimestampStrategy": "latest"})
    consumer = FakeTimeConsumer(STAMPS)
    stream = RinglogStreamReader(options, ringlog_schema(False),
                                 offsets=OffsetReader(options, consumer))
    assert stream.initialOffset() == {"a": {"0": 2, "1": 2}}  # a-1: none, so latest
    assert consumer.asked == [{A0: 260, A1: 260}]
