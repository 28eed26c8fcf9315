"""The ringlog source's options (spark_bridge.options): Spark's Kafka source names,
defaults and rules; every bad or conflicting option fails with a message naming it. No
Spark session, no cluster: these run in milliseconds (the Spark-level check that such an
error reaches the user is in test_source_batch.py)."""
from __future__ import annotations

import logging

import pytest

from cluster.structs import TopicPartition
from spark_bridge.consumer_strategy import Assign, Subscribe, SubscribePattern
from spark_bridge.options import (
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    DEFAULT_POLL_TIMEOUT_MS,
    KNOWN_OPTIONS,
    InvalidOptionError,
    duration_ms,
    include_headers,
    parse_batch_options,
    parse_stream_options,
    validate_common,
)
from spark_bridge.timestamp_offsets import ByTimestamp

BASE = {"bootstrap.servers": "/data", "subscribe": "t"}


def batch(**extra):
    return parse_batch_options({**BASE, **extra})


def stream(**extra):
    return parse_stream_options({**BASE, **extra})


def test_defaults_are_spark_kafka_defaults():
    b = batch()
    assert (b.starting, b.ending, b.fail_on_data_loss, b.include_headers, b.min_partitions,
            b.max_offsets_per_trigger, b.poll_timeout_ms) == (
        "earliest", "latest", True, False, None, None, DEFAULT_POLL_TIMEOUT_MS)
    s = stream()
    assert (s.starting, s.ending) == ("latest", None)
    assert (s.min_offsets_per_trigger, s.max_trigger_delay_ms, s.max_records_per_partition) \
        == (None, 15 * 60_000, None) == (None, DEFAULT_MAX_TRIGGER_DELAY_MS, None)


def test_isolation_level_is_the_kafka_consumer_setting():
    assert batch().isolation_level == stream().isolation_level == "read_uncommitted"
    assert batch(**{"kafka.isolation.level": "read_committed"}).isolation_level \
        == "read_committed"
    assert stream(**{"KAFKA.ISOLATION.LEVEL": " READ_COMMITTED"}).isolation_level \
        == "read_committed"


def test_trigger_and_split_options_parsed():
    s = stream(minOffsetsPerTrigger="100", maxOffsetsPerTrigger="100", MAXTRIGGERDELAY="30s",
               maxRecordsPerPartition="5000")
    assert (s.min_offsets_per_trigger, s.max_offsets_per_trigger, s.max_trigger_delay_ms,
            s.max_records_per_partition) == (100, 100, 30_000, 5000)
    assert batch(maxRecordsPerPartition="7").max_records_per_partition == 7


@pytest.mark.parametrize("text, ms", [("15m", 900_000), ("15min", 900_000), ("500ms", 500),
                                      ("30s", 30_000), ("2h", 7_200_000), ("1d", 86_400_000),
                                      ("250", 250), (" 3S ", 3000), ("1500us", 1)])
def test_durations_as_spark_reads_them(text, ms):
    assert duration_ms(text) == ms


def test_names_are_case_insensitive_and_values_parsed():
    s = parse_stream_options({"BOOTSTRAP.SERVERS": " /data ", "SubscribePattern": "log-.*",
                              "STARTINGOFFSETS": "Earliest", "maxoffsetspertrigger": "50",
                              "FailOnDataLoss": "FALSE", "minPartitions": "3",
                              "includeHeaders": "true", "kafkaConsumer.pollTimeoutMs": "500"})
    assert s.bootstrap_servers == "/data"
    assert s.strategy == SubscribePattern("log-.*")
    assert (s.starting, s.max_offsets_per_trigger, s.fail_on_data_loss, s.min_partitions,
            s.include_headers, s.poll_timeout_ms) == ("earliest", 50, False, 3, True, 500)


def test_strategies():
    assert batch(subscribe=" a, b ,,").strategy == Subscribe(("a", "b"))
    assign = parse_batch_options({"bootstrap.servers": "/d", "assign": '{"b":[1,0],"a":[2]}'})
    assert assign.strategy == Assign((TopicPartition("a", 2), TopicPartition("b", 0),
                                      TopicPartition("b", 1)))


def test_spark_bootstrap_option_name_works_too():
    options = parse_batch_options({"kafka.bootstrap.servers": "/d", "subscribe": "t"})
    assert options.bootstrap_servers == "/d"


def test_json_offsets():
    b = batch(startingOffsets='{"t":{"0":23,"1":-2}}', endingOffsets='{"t":{"0":50,"1":-1}}')
    assert b.starting == {TopicPartition("t", 0): 23, TopicPartition("t", 1): -2}
    assert b.ending == {TopicPartition("t", 0): 50, TopicPartition("t", 1): -1}
    assert stream(startingOffsets='{"t":{"0":-1}}').starting == {TopicPartition("t", 0): -1}


def test_include_headers_alone_is_what_schema_needs():
    assert include_headers({"INCLUDEHEADERS": "True"}) is True
    assert include_headers({}) is False


INVALID = [
    # (options replacing BASE entirely, which option the message names)
    ({"subscribe": "t"}, "bootstrap.servers"),
    ({"bootstrap.servers": " ", "subscribe": "t"}, "bootstrap.servers"),
    ({"bootstrap.servers": "/a", "kafka.bootstrap.servers": "/b", "subscribe": "t"},
     "kafka.bootstrap.servers"),
    ({"bootstrap.servers": "/d"}, "subscribePattern"),
    ({"bootstrap.servers": "/d", "subscribe": "t", "assign": '{"t":[0]}'}, "assign"),
    ({"bootstrap.servers": "/d", "subscribe": "t", "subscribePattern": "t.*"},
     "subscribePattern"),
    ({"bootstrap.servers": "/d", "subscribe": " , "}, "subscribe"),
    ({"bootstrap.servers": "/d", "subscribePattern": "  "}, "subscribePattern"),
    ({"bootstrap.servers": "/d", "subscribePattern": "log-(["}, "subscribePattern"),
    ({"bootstrap.servers": "/d", "assign": "t:0"}, "assign"),
    ({"bootstrap.servers": "/d", "assign": '{"t":0}'}, "assign"),
    ({"bootstrap.servers": "/d", "assign": '{"t":[]}'}, "assign"),
    ({**BASE, "minPartitions": "0"}, "minPartitions"),
    ({**BASE, "minPartitions": "many"}, "minPartitions"),
    ({**BASE, "failOnDataLoss": "yes"}, "failOnDataLoss"),
    ({**BASE, "includeHeaders": "1"}, "includeHeaders"),
    ({**BASE, "kafkaConsumer.pollTimeoutMs": "-5"}, "kafkaConsumer.pollTimeoutMs"),
    ({**BASE, "startingOffsets": "first"}, "startingOffsets"),
    ({**BASE, "startingOffsets": '{"t":{"0":"5"}}'}, "startingOffsets"),
    ({**BASE, "startingOffsets": '{"t":{"x":5}}'}, "startingOffsets"),
    ({**BASE, "startingOffsets": '{"t":{"0":-3}}'}, "startingOffsets"),
    ({**BASE, "startingTimestamp": "yesterday"}, "startingTimestamp.*'yesterday'"),
    ({**BASE, "startingTimestamp": "-1"}, "startingTimestamp.*'-1'"),
    ({**BASE, "startingTimestamp": "1.5"}, "startingTimestamp.*'1.5'"),
    ({**BASE, "startingOffsetsByTimestamp": '{"t":{"0":1}'},
     "startingOffsetsByTimestamp.*Expected e.g."),
    ({**BASE, "startingOffsetsByTimestamp": '{"t":{"0":"1"}}'}, "startingOffsetsByTimestamp"),
    ({**BASE, "startingOffsetsByTimestamp": '{"t":{"0":-5}}'},
     "startingOffsetsByTimestamp.*-5 of t-0"),
    ({**BASE, "startingOffsetsByTimestamp": '{}'}, "startingOffsetsByTimestamp"),
    ({**BASE, "startingOffsetsByTimestamp": '{"t":{"0":1},"u":{"0":1}}'},
     "startingOffsetsByTimestamp' names topic 'u'"),
    ({"bootstrap.servers": "/d", "subscribePattern": "log-.*",
      "startingOffsetsByTimestamp": '{"logs":{"0":1}}'}, "names topic 'logs'"),
    ({**BASE, "startingTimestamp": "5", "startingOffsetsByTimestampStrategy": "skip"},
     "startingOffsetsByTimestampStrategy.*'skip'"),
    ({**BASE, "kafka.auto.offset.reset": "earliest"}, "auto.offset.reset"),
    ({**BASE, "kafka.value.deserializer": "x"}, "value.deserializer"),
    ({**BASE, "kafka.enable.auto.commit": "true"}, "enable.auto.commit"),
    ({**BASE, "minOffsetsPerTrigger": "0"}, "minOffsetsPerTrigger"),
    ({**BASE, "minOffsetsPerTrigger": "some"}, "minOffsetsPerTrigger"),
    ({**BASE, "minOffsetsPerTrigger": "101", "maxOffsetsPerTrigger": "100"},
     "minOffsetsPerTrigger' \\(101\\) is higher than option 'maxOffsetsPerTrigger' \\(100\\)"),
    ({**BASE, "maxTriggerDelay": "soon"}, "maxTriggerDelay.*'soon'"),
    ({**BASE, "maxTriggerDelay": "1.5s"}, "maxTriggerDelay"),
    ({**BASE, "maxTriggerDelay": "-5s"}, "maxTriggerDelay"),
    ({**BASE, "maxRecordsPerPartition": "0"}, "maxRecordsPerPartition"),
    ({**BASE, "maxRecordsPerPartition": "lots"}, "maxRecordsPerPartition"),
    ({**BASE, "kafka.isolation.level": "serializable"}, "kafka.isolation.level.*serializable"),
]


@pytest.mark.parametrize("options, named", INVALID)
@pytest.mark.parametrize("parse", [parse_batch_options, parse_stream_options, validate_common])
def test_invalid_option_names_the_option(options, named, parse):
    with pytest.raises(InvalidOptionError, match=named):
        parse(options)


BATCH_ONLY = [
    ({"startingOffsets": "latest"}, "startingOffsets"),
    ({"startingOffsets": '{"t":{"0":-1}}'}, "startingOffsets"),
    ({"endingOffsets": "earliest"}, "endingOffsets"),
    ({"endingOffsets": '{"t":{"0":-2}}'}, "endingOffsets"),
    ({"startingOffsets": '{"t":{"0":5}}', "endingOffsets": '{"t":{"1":9}}'}, "endingOffsets"),
    ({"startingOffsets": '{"t":{"0":9}}', "endingOffsets": '{"t":{"0":5}}'}, "startingOffsets"),
    ({"endingTimestamp": "soon"}, "endingTimestamp.*'soon'"),
    ({"endingOffsetsByTimestamp": '{"u":{"0":5}}'}, "endingOffsetsByTimestamp.*'u'"),
    ({"endingOffsetsByTimestamp": "[5]"}, "endingOffsetsByTimestamp.*Expected e.g."),
]


@pytest.mark.parametrize("extra, named", BATCH_ONLY)
def test_batch_offset_rules(extra, named):
    with pytest.raises(InvalidOptionError, match=named):
        batch(**extra)


def test_batch_allows_earliest_and_latest_markers_where_spark_does():
    b = batch(startingOffsets='{"t":{"0":-2}}', endingOffsets='{"t":{"0":-1}}')
    assert b.starting == {TopicPartition("t", 0): -2}


@pytest.mark.parametrize("extra, named", [
    ({"endingOffsets": "latest"}, "endingOffsets"),
    ({"endingTimestamp": "5"}, "endingTimestamp' is not valid in streaming"),
    ({"endingOffsetsByTimestamp": '{"t":{"0":5}}'}, "endingOffsetsByTimestamp' is not valid"),
    ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
    ({"maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger"),
])
def test_stream_rules(extra, named):
    with pytest.raises(InvalidOptionError, match=named):
        stream(**extra)


def test_stream_allows_latest_start():
    assert stream(startingOffsets="latest").starting == "latest"


# -- timestamp options -------------------------------------------------------------------------

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_timestamp_options_parsed():
    b = batch(startingTimestamp=" 1700000000000", endingOffsetsByTimestamp='{"t":{"0":5,"1":0}}')
    assert b.starting == ByTimestamp(1_700_000_000_000, "error")
    assert b.ending == ByTimestamp({T0: 5, T1: 0}, "latest")
    s = stream(STARTINGOFFSETSBYTIMESTAMP='{"t":{"1":7}}',
               startingOffsetsByTimestampStrategy="LATEST")
    assert s.starting == ByTimestamp({T1: 7}, "latest")
    assert stream(startingTimestamp="0").starting == ByTimestamp(0, "error")


def test_the_strategy_applies_to_starting_offsets_only():
    b = batch(startingTimestamp="5", endingTimestamp="9",
              startingOffsetsByTimestampStrategy="error")
    assert (b.starting.on_no_match, b.ending.on_no_match) == ("error", "latest")


def test_timestamp_options_take_precedence_as_in_spark():
    # startingTimestamp > startingOffsetsByTimestamp > startingOffsets; the same for ending.
    b = batch(startingTimestamp="5", startingOffsetsByTimestamp='{"t":{"0":6}}',
              startingOffsets="earliest", endingTimestamp="9",
              endingOffsetsByTimestamp='{"t":{"0":8}}', endingOffsets="latest")
    assert (b.starting, b.ending) == (ByTimestamp(5), ByTimestamp(9, "latest"))
    b = batch(startingOffsetsByTimestamp='{"t":{"0":6}}', startingOffsets='{"t":{"0":1}}',
              endingOffsetsByTimestamp='{"t":{"0":8}}', endingOffsets='{"t":{"0":2}}')
    assert (b.starting, b.ending) == (ByTimestamp({T0: 6}), ByTimestamp({T0: 8}, "latest"))
    # ... so batch's rules on the offsets a timestamp option overrides do not apply
    b = batch(startingTimestamp="5", startingOffsets="latest", endingTimestamp="9",
              endingOffsets="earliest")
    assert (b.starting, b.ending) == (ByTimestamp(5), ByTimestamp(9, "latest"))
    s = stream(startingTimestamp="5", startingOffsets="latest")
    assert s.starting == ByTimestamp(5)


def test_timestamps_of_an_assigned_or_matching_topic_are_accepted():
    options = {"bootstrap.servers": "/d", "assign": '{"t":[0,1]}',
               "startingOffsetsByTimestamp": '{"t":{"0":1,"1":2}}'}
    assert parse_stream_options(options).starting == ByTimestamp({T0: 1, T1: 2})
    options = {"bootstrap.servers": "/d", "subscribePattern": "t|u",
               "startingOffsetsByTimestamp": '{"t":{"0":1}}'}
    assert parse_batch_options(options).starting == ByTimestamp({T0: 1})


# -- unknown options ----------------------------------------------------------------------------

def warnings_of(caplog, parse, options):
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="spark_bridge.options"):
        parse(options)
    return [(r.levelno, r.getMessage()) for r in caplog.records]


@pytest.mark.parametrize("parse", [parse_batch_options, parse_stream_options])
def test_an_unknown_option_is_warned_about_once_naming_it(caplog, parse):
    got = warnings_of(caplog, parse, {**BASE, "startingOffset": "x", "maxOffsetPerTriger": "5"})
    assert [level for level, _ in got] == [logging.WARNING, logging.WARNING]
    assert "'maxOffsetPerTriger'" in got[0][1] and "'startingOffset'" in got[1][1]
    assert all("ringlog source" in message and "ignored" in message for _, message in got)


def test_kafka_consumer_settings_get_one_debug_line(caplog):
    got = warnings_of(caplog, parse_stream_options,
                      {**BASE, "kafka.security.protocol": "SSL", "kafka.group.id": "g"})
    assert len(got) == 1 and got[0][0] == logging.DEBUG
    assert "kafka.group.id" in got[0][1] and "kafka.security.protocol" in got[0][1]


def test_known_options_are_not_warned_about(caplog):
    options = {**BASE, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "9",
               "minOffsetsPerTrigger": "3", "maxTriggerDelay": "1m", "failOnDataLoss": "false",
               "minPartitions": "2", "maxRecordsPerPartition": "10", "includeHeaders": "true",
               "kafkaConsumer.pollTimeoutMs": "100", "startingTimestamp": "1",
               "startingOffsetsByTimestamp": '{"t":{"0":1}}',
               "startingOffsetsByTimestampStrategy": "latest"}
    assert {name.lower() for name in options} <= KNOWN_OPTIONS
    assert warnings_of(caplog, parse_stream_options, options) == []


def test_batch_says_the_trigger_options_are_ignored_not_unknown(caplog):
    got = warnings_of(caplog, parse_batch_options,
                      {**BASE, "minOffsetsPerTrigger": "3", "maxTriggerDelay": "1m"})
    assert [m for _, m in got] == ["minOffsetsPerTrigger option ignored in batch queries",
                                   "maxTriggerDelay option ignored in batch queries"]
