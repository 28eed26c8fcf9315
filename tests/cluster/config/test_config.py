"""cluster.config: properties files, broker config with Kafka's defaults and precedence, the
mapping to LogConfig, and kafka-python-compatible client configs."""
from __future__ import annotations

import logging
import math
import pickle
import re
import resource

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from cluster.config import (
    BROKER_KEYS,
    TOPIC_SYNONYMS,
    AdminClientConfig,
    BrokerConfig,
    ConsumerConfig,
    ProducerConfig,
    load_properties,
    parse_overrides,
    parse_properties,
)
from cluster.config.client import PARTITIONER_NAMES
from cluster.errors import InvalidConfigurationError, KafkaConfigurationError, error_code
from cluster.producer.partitioner import (
    PARTITIONERS,
    CallablePartitioner,
    DefaultPartitioner,
    RoundRobinPartitioner,
    resolve_partitioner,
)
from segments.log_config import KNOWN_KEYS, LogConfig
from shm_ring.wakeup import WaitPolicy

LONG_MAX = 2**63 - 1

# -- properties files ------------------------------------------------------------------------


def test_comments_and_blank_lines_are_skipped():
    text = "# a comment\n! another\n   # indented comment\n\n  \t\nkey=value\n"
    assert parse_properties(text) == {"key": "value"}


@pytest.mark.parametrize("line, key, value", [
    ("a=1", "a", "1"),
    ("a = 1", "a", "1"),
    ("a:1", "a", "1"),
    ("a : 1", "a", "1"),
    ("a 1", "a", "1"),
    ("a\t \t1", "a", "1"),
    ("a \f= 1", "a", "1"),
    ("a=:1", "a", ":1"),  # only the first separator separates
    ("a = = 1", "a", "= 1"),
    ("a   ", "a", ""),
    ("a", "a", ""),
    ("a=", "a", ""),
    ("a = v  ", "a", "v  "),  # trailing whitespace is kept
    ("   a=1", "a", "1"),
    ("a=x#y", "a", "x#y"),  # '#' is a comment only at the start of a line
    ("url=http://h:9092/p", "url", "http://h:9092/p"),
])
def test_key_value_separators_follow_java(line, key, value):
    assert parse_properties(line) == {key: value}


def test_continuation_lines_join_and_drop_leading_whitespace():
    text = "servers = a:1,\\\n    b:2,\\\n\t  c:3\nnext=1\n"
    assert parse_properties(text) == {"servers": "a:1,b:2,c:3", "next": "1"}


def test_continuation_line_starting_with_hash_is_not_a_comment():
    assert parse_properties("a=1\\\n# not a comment\n") == {"a": "1# not a comment"}


def test_comment_lines_are_never_continued():
    assert parse_properties("# comment \\\na=1\n") == {"a": "1"}


def test_an_empty_continuation_line_ends_the_value():
    assert parse_properties("a=1\\\n   \nb=2") == {"a": "1", "b": "2"}


def test_backslash_at_end_of_text_is_dropped():
    assert parse_properties("a=1\\") == {"a": "1"}


def test_an_even_number_of_trailing_backslashes_is_an_escaped_backslash():
    assert parse_properties("a=x\\\\\nb=2") == {"a": "x\\", "b": "2"}


def test_key_spanning_a_continuation():
    assert parse_properties("lo\\\n  ng=1") == {"long": "1"}


@pytest.mark.parametrize("line, key, value", [
    ("a=\\u0041\\u00e9", "a", "Aé"),
    ("a=\\t\\n\\r\\f", "a", "\t\n\r\f"),
    ("a=\\q\\\\", "a", "q\\"),  # any other escaped character stands for itself
    ("k\\=e\\:y\\ x=v", "k=e:y x", "v"),
    ("k\\ ey v", "k ey", "v"),
    ("\\#k=v", "#k", "v"),
])
def test_escapes(line, key, value):
    assert parse_properties(line) == {key: value}


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_line_endings(ending):
    assert parse_properties(ending.join(["a=1", "b=2\\", " 3", "#c=4", ""])) == {
        "a": "1", "b": "23"}


def test_malformed_unicode_escape_names_source_and_line():
    with pytest.raises(InvalidConfigurationError, match=r"server.properties line 3: .*\\u12z"):
        parse_properties("a=1\n\nb=\\u12z\n", source="server.properties")


def test_last_value_wins():
    assert parse_properties("a=1\na=2") == {"a": "2"}


def test_load_properties_reads_utf8(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("client.id=café\n", encoding="utf-8")
    assert load_properties(path) == {"client.id": "café"}


def test_overrides_split_at_the_first_equals_like_kafka():
    assert parse_overrides(["a=b=c", "flag", "empty=", " sp = x "]) == {
        "a": "b=c", "flag": "", "empty": "", " sp ": " x "}


# -- broker: defaults --------------------------------------------------------------------------

# Kafka's defaults, from apache/kafka ServerLogConfigs, ServerConfigs, ReplicationConfigs,
# GroupCoordinatorConfig, CleanerConfig and LogConfig (3.9).
KAFKA_BROKER_DEFAULTS = {
    "broker.id": -1,
    "num.partitions": 1,
    "default.replication.factor": 1,
    "min.insync.replicas": 1,
    "auto.create.topics.enable": True,
    "delete.topic.enable": True,
    "log.segment.bytes": 1024**3,
    "log.roll.ms": None,
    "log.roll.hours": 168,
    "log.retention.ms": None,
    "log.retention.minutes": None,
    "log.retention.hours": 168,
    "log.retention.bytes": -1,
    "log.retention.check.interval.ms": 300000,
    "log.cleanup.policy": "delete",
    "log.cleaner.delete.retention.ms": 86400000,
    "log.cleaner.min.compaction.lag.ms": 0,
    "log.cleaner.min.cleanable.ratio": 0.5,
    "log.flush.interval.messages": LONG_MAX,
    "log.flush.interval.ms": None,
    "log.flush.scheduler.interval.ms": LONG_MAX,
    "log.index.interval.bytes": 4096,
    "log.index.size.max.bytes": 10 * 1024 * 1024,
    "log.message.timestamp.type": "CreateTime",
    "message.max.bytes": 1048588,
    "producer.id.expiration.ms": 86400000,
    "producer.id.expiration.check.interval.ms": 600000,
    "replica.lag.time.max.ms": 30000,
    "replica.high.watermark.checkpoint.interval.ms": 5000,
    "replica.fetch.max.bytes": 1048576,
    "replica.fetch.wait.max.ms": 500,
    "replica.fetch.min.bytes": 1,
    "replica.fetch.response.max.bytes": 10 * 1024 * 1024,
    "unclean.leader.election.enable": False,
    "auto.leader.rebalance.enable": True,
    "leader.imbalance.check.interval.seconds": 300,
    "leader.imbalance.per.broker.percentage": 10,
    "offsets.topic.num.partitions": 50,
    "offsets.topic.replication.factor": 3,
    "group.initial.rebalance.delay.ms": 3000,
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 1800000,
    "group.max.size": 2147483647,
    "offsets.retention.minutes": 10080,
    "offsets.retention.check.interval.ms": 600000,
    "offset.metadata.max.bytes": 4096,
    "controlled.shutdown.enable": True,
}


def test_broker_defaults_are_kafkas():
    config = BrokerConfig()
    assert {k: config[k] for k in KAFKA_BROKER_DEFAULTS} == KAFKA_BROKER_DEFAULTS


def test_replica_fetch_backoff_is_shorter_than_kafkas_on_one_host():
    assert BrokerConfig()["replica.fetch.backoff.ms"] == 100


def test_ringlog_transport_defaults():
    config = BrokerConfig()
    assert config["ringlog.ring.bytes"] == 4 * 1024 * 1024
    assert config["ringlog.spin.iterations"] == config.wait_policy().spin == 20
    assert config["ringlog.park.timeout.ms"] == 50
    assert config.wait_policy().poll_interval == WaitPolicy().poll_interval
    assert config["ringlog.gc.freeze"] is True
    assert BrokerConfig({"ringlog.gc.freeze": "false"})["ringlog.gc.freeze"] is False
    assert config["ringlog.fsync"] is True
    assert BrokerConfig({"ringlog.fsync": "false"})["ringlog.fsync"] is False


def test_wait_policy_follows_the_keys():
    clock = iter(range(100)).__next__
    policy = BrokerConfig({"ringlog.spin.iterations": "7", "ringlog.park.timeout.ms": "250"}
                          ).wait_policy(clock)
    assert (policy.spin, policy.poll_interval, policy.clock) == (7, 0.25, clock)


def test_topic_defaults_equal_log_config_defaults():
    assert BrokerConfig().log_config() == LogConfig()


def test_every_log_config_key_has_a_broker_synonym():
    assert TOPIC_SYNONYMS.keys() >= KNOWN_KEYS
    for synonyms in TOPIC_SYNONYMS.values():
        for broker_name, _ in synonyms:
            assert broker_name in BROKER_KEYS


def test_log_dirs_is_derived_from_data_dir_and_broker_id(tmp_path):
    assert BrokerConfig({"broker.id": "2"}, data_dir=tmp_path)["log.dirs"] == str(
        tmp_path / "broker-2")
    assert BrokerConfig({"broker.id": "2"})["log.dirs"] is None
    assert BrokerConfig(data_dir=tmp_path)["log.dirs"] is None  # broker.id -1: not known yet


# -- broker: files, overrides, unknown keys ----------------------------------------------------

SERVER_PROPERTIES = """\
# server.properties as Kafka ships it, abridged
broker.id=0
num.partitions = 3
log.dirs=/tmp/kafka-logs
listeners=PLAINTEXT://:9092
log.retention.hours: 24
auto.create.topics.enable FALSE
log.cleanup.policy=compact,\\
    delete
"""


def test_load_reads_file_with_kafka_types(tmp_path, caplog):
    path = tmp_path / "server.properties"
    path.write_text(SERVER_PROPERTIES)
    with caplog.at_level(logging.WARNING):
        config = BrokerConfig.load(path, data_dir=tmp_path / "data")
    assert config["broker.id"] == 0
    assert config["num.partitions"] == 3
    assert config["log.retention.hours"] == 24
    assert config["auto.create.topics.enable"] is False
    assert config["log.cleanup.policy"] == "compact,delete"
    assert config["log.dirs"] == str(tmp_path / "data" / "broker-0")
    assert "listeners" not in config


def test_unknown_and_derived_keys_are_logged_and_ignored(caplog):
    with caplog.at_level(logging.WARNING, logger="cluster.config.broker"):
        config = BrokerConfig({"listeners": "PLAINTEXT://:9092", "zookeeper.connect": "zk:2181",
                               "log.dirs": "/tmp/kafka-logs", "num.partitions": "2"})
    text = caplog.text
    assert "'listeners'" in text and "'PLAINTEXT://:9092'" in text
    assert "'zookeeper.connect'" in text
    assert "'log.dirs'" in text and "data directory" in text
    assert config["num.partitions"] == 2
    assert {"listeners", "zookeeper.connect"}.isdisjoint(config)
    assert config.props == {"num.partitions": "2"}


def test_overrides_win_over_file_which_wins_over_defaults(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nmin.insync.replicas=2\n")
    config = BrokerConfig.load(path, ["num.partitions=5", "broker.id=4"])
    assert config["num.partitions"] == 5  # override over file
    assert config["min.insync.replicas"] == 2  # file over default
    assert config["broker.id"] == 4  # override over default
    assert config["default.replication.factor"] == 1  # default


def test_empty_override_value_is_a_bad_value_like_kafka(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("")
    with pytest.raises(InvalidConfigurationError,
                       match="invalid value '' for broker config 'num.partitions'"):
        BrokerConfig.load(path, ["num.partitions"])


def test_typed_values_from_code_are_accepted():
    config = BrokerConfig({"num.partitions": 4, "delete.topic.enable": False,
                           "log.cleanup.policy": ["compact"], "log.retention.ms": None})
    assert config["num.partitions"] == 4
    assert config["delete.topic.enable"] is False
    assert config.log_config().cleanup_policy == {"compact"}


@pytest.mark.parametrize("raw, expected", [
    ("true", True), ("TRUE", True), (" False ", False), (True, True), (False, False)])
def test_booleans_parse_like_kafka(raw, expected):
    assert BrokerConfig({"controlled.shutdown.enable": raw})["controlled.shutdown.enable"] is (
        expected)


def test_integers_are_trimmed():
    assert BrokerConfig({"num.partitions": " 7 \t"})["num.partitions"] == 7


# -- broker: precedence of ms / minutes / hours ------------------------------------------------

HOUR = 3600 * 1000


@pytest.mark.parametrize("props, retention_ms", [
    ({}, 168 * HOUR),
    ({"log.retention.hours": "1"}, HOUR),
    ({"log.retention.minutes": "5", "log.retention.hours": "1"}, 5 * 60 * 1000),
    ({"log.retention.ms": "1234", "log.retention.minutes": "5",
      "log.retention.hours": "1"}, 1234),
    ({"log.retention.ms": "1234", "log.retention.hours": "1"}, 1234),
    ({"log.retention.hours": "-1"}, -1),
    ({"log.retention.minutes": "-3"}, -1),
    ({"log.retention.ms": "-1", "log.retention.hours": "5"}, -1),
    ({"log.retention.ms": "-100"}, -1),  # Kafka: any negative means unlimited
])
def test_retention_precedence_is_kafkas(props, retention_ms):
    config = BrokerConfig(props)
    assert config.topic_defaults["retention.ms"] == retention_ms
    assert config.log_config().retention_ms == retention_ms


@pytest.mark.parametrize("key", ["log.retention.ms", "log.retention.minutes",
                                 "log.retention.hours"])
def test_zero_retention_is_refused_naming_the_key_that_set_it(key):
    with pytest.raises(InvalidConfigurationError,
                       match=f"invalid value '0' for broker config '{key}': expected a time"):
        BrokerConfig({key: "0"})


@pytest.mark.parametrize("props, segment_ms", [
    ({}, 168 * HOUR),
    ({"log.roll.hours": "2"}, 2 * HOUR),
    ({"log.roll.ms": "500", "log.roll.hours": "2"}, 500),
])
def test_roll_precedence_is_kafkas(props, segment_ms):
    assert BrokerConfig(props).log_config().segment_ms == segment_ms


def test_roll_ms_below_one_is_refused_naming_it():
    with pytest.raises(InvalidConfigurationError, match=(
            r"'0' for broker config 'log.roll.ms': expected a value in \[1, .*'segment.ms'")):
        BrokerConfig({"log.roll.ms": "0"})


def test_flush_ms_falls_back_to_the_scheduler_interval():
    assert BrokerConfig({"log.flush.scheduler.interval.ms": "2000"}
                        ).log_config().flush_ms == 2000
    assert BrokerConfig({"log.flush.interval.ms": "300",
                         "log.flush.scheduler.interval.ms": "2000"}).log_config().flush_ms == 300


# -- broker: mapping to LogConfig ---------------------------------------------------------------

BROKER_LOG_PROPS = {
    "log.segment.bytes": "1048576",
    "log.index.size.max.bytes": "4096",
    "log.index.interval.bytes": "100",
    "log.retention.bytes": "5000000",
    "log.retention.minutes": "10",
    "log.roll.hours": "3",
    "log.cleanup.policy": "compact,delete",
    "log.cleaner.delete.retention.ms": "5",
    "log.cleaner.min.compaction.lag.ms": "6",
    "log.cleaner.min.cleanable.ratio": "0.25",
    "log.flush.interval.messages": "1000",
    "log.flush.interval.ms": "700",
    "log.message.timestamp.type": "LogAppendTime",
    "message.max.bytes": "2000",
}


def test_broker_keys_map_to_topic_level_log_config():
    assert BrokerConfig(BROKER_LOG_PROPS).log_config() == LogConfig(
        segment_bytes=1048576, segment_index_bytes=4096, index_interval_bytes=100,
        retention_bytes=5000000, retention_ms=10 * 60 * 1000, segment_ms=3 * HOUR,
        cleanup_policy=frozenset({"compact", "delete"}), delete_retention_ms=5,
        min_compaction_lag_ms=6, min_cleanable_dirty_ratio=0.25, flush_messages=1000,
        flush_ms=700, message_timestamp_type="LogAppendTime", max_message_bytes=2000)


def test_topic_overrides_win_over_broker_defaults():
    config = BrokerConfig(BROKER_LOG_PROPS)
    log_config = config.log_config({"segment.bytes": "2048", "retention.ms": 10,
                                    "cleanup.policy": "delete"})
    assert (log_config.segment_bytes, log_config.retention_ms) == (2048, 10)
    assert log_config.cleanup_policy == {"delete"}
    assert log_config.max_message_bytes == 2000  # from the broker
    assert log_config.segment_ms == 3 * HOUR


def test_topic_config_includes_replication_settings():
    config = BrokerConfig({"min.insync.replicas": "2", "unclean.leader.election.enable": "true"})
    assert config.topic_config()["min.insync.replicas"] == 2
    topic = config.topic_config({"min.insync.replicas": "3",
                                 "unclean.leader.election.enable": "false"})
    assert topic["min.insync.replicas"] == 3
    assert topic["unclean.leader.election.enable"] is False
    assert config.log_config({"min.insync.replicas": "3"}) == config.log_config()


def test_unknown_topic_config_raises_naming_it():
    with pytest.raises(InvalidConfigurationError, match="'segment.size'.*'1'"):
        BrokerConfig().log_config({"segment.size": "1"})


@pytest.mark.parametrize("name, raw", [
    ("segment.bytes", "10"), ("retention.ms", "soon"), ("cleanup.policy", "forever"),
    ("min.insync.replicas", "0"), ("unclean.leader.election.enable", "maybe"),
])
def test_bad_topic_value_raises_naming_key_and_value(name, raw):
    with pytest.raises(InvalidConfigurationError) as info:
        BrokerConfig().topic_config({name: raw})
    assert repr(name) in str(info.value) and repr(raw) in str(info.value)
    assert "expected" in str(info.value)
    assert error_code(info.value) == 40


# -- broker: validation --------------------------------------------------------------------------

BAD_BROKER_VALUES = [
    ("broker.id", "-2"), ("broker.id", "one"), ("num.partitions", "0"),
    ("num.partitions", "1.5"), ("num.partitions", "1_000"), ("num.partitions", True),
    ("default.replication.factor", "0"), ("min.insync.replicas", "0"),
    ("auto.create.topics.enable", "yes"), ("delete.topic.enable", 1),
    ("log.segment.bytes", "10"), ("log.segment.bytes", str(2**31)),
    ("log.roll.hours", "0"), ("log.retention.hours", "1.5"), ("log.retention.bytes", "-2"),
    ("log.retention.check.interval.ms", "0"), ("log.cleanup.policy", "forever"),
    ("log.cleaner.delete.retention.ms", "-1"), ("log.cleaner.min.cleanable.ratio", "2"),
    ("log.flush.interval.messages", "0"), ("log.index.interval.bytes", "-1"),
    ("log.index.size.max.bytes", "3"), ("log.message.timestamp.type", "Now"),
    ("compression.type", "brotli"), ("log.message.format.version", "0.10.x"),
    ("message.max.bytes", "-1"), ("replica.lag.time.max.ms", "-1"),
    ("producer.id.expiration.ms", "0"), ("producer.id.expiration.check.interval.ms", "0"),
    ("replica.high.watermark.checkpoint.interval.ms", "0"),
    ("replica.fetch.max.bytes", "-1"), ("replica.fetch.wait.max.ms", "-1"),
    ("replica.fetch.min.bytes", "0"), ("replica.fetch.response.max.bytes", "-1"),
    ("replica.fetch.backoff.ms", "-1"),
    ("unclean.leader.election.enable", "no"), ("offsets.topic.num.partitions", "0"),
    ("offsets.topic.replication.factor", "40000"), ("group.initial.rebalance.delay.ms", "-1"),
    ("offsets.topic.segment.bytes", "0"), ("offsets.commit.timeout.ms", "0"),
    ("offsets.load.buffer.size", "0"), ("transaction.state.log.num.partitions", "0"),
    ("transaction.state.log.replication.factor", "40000"), ("transaction.max.timeout.ms", "0"),
    ("transactional.id.expiration.ms", str(2**31)), ("transaction.state.log.min.isr", "0"),
    ("transaction.state.log.segment.bytes", "0"), ("transaction.state.log.load.buffer.size", "0"),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", "0"),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", "-1"),
    ("group.min.session.timeout.ms", "x"), ("controlled.shutdown.enable", ""),
    ("ringlog.gc.freeze", "sometimes"),
    ("ringlog.fsync", "never"),
    ("ringlog.ring.bytes", "1000000"), ("ringlog.ring.bytes", "64k"),
    ("ringlog.ring.bytes", str(2**31)), ("ringlog.spin.iterations", "-1"),
    ("ringlog.park.timeout.ms", "0"), ("log.flush.interval.ms", "-5"),
    ("log.flush.scheduler.interval.ms", "-1"), ("log.roll.ms", "0"), ("log.retention.ms", "x"),
    ("log.retention.minutes", "0"), ("log.cleaner.min.compaction.lag.ms", "-1"),
    ("group.max.session.timeout.ms", "-1"), ("ringlog.max.open.segment.files", "-2"),
    ("ringlog.max.partitions.per.broker", "x"), ("auto.leader.rebalance.enable", "on"),
    ("leader.imbalance.check.interval.seconds", "0"),
    ("leader.imbalance.per.broker.percentage", "-1"),
    ("controlled.shutdown.max.retries", "-1"), ("controlled.shutdown.retry.backoff.ms", "x"),
    ("broker.heartbeat.interval.ms", "0"), ("broker.session.timeout.ms", "-1"),
    ("group.max.size", "0"),
    ("offsets.retention.minutes", "0"), ("offsets.retention.check.interval.ms", "0"),
    ("offset.metadata.max.bytes", "4k"),
]


def test_a_heartbeat_interval_of_the_session_timeout_or_more_is_refused():
    with pytest.raises(InvalidConfigurationError, match=r"broker.heartbeat.interval.ms \(6000\) "
                       r"must be less than broker.session.timeout.ms \(6000\)"):
        BrokerConfig({"broker.heartbeat.interval.ms": 6000})
    assert BrokerConfig({})["broker.session.timeout.ms"] == 6000


@pytest.mark.parametrize("name, raw", BAD_BROKER_VALUES)
def test_every_bad_broker_value_names_key_value_and_expectation(name, raw):
    with pytest.raises(InvalidConfigurationError) as info:
        BrokerConfig({name: raw})
    message = str(info.value)
    assert repr(name) in message and repr(raw) in message, message
    assert "expected" in message, message
    assert info.value.errno == 40


def test_every_broker_key_has_a_bad_value_case():
    assert {name for name, _ in BAD_BROKER_VALUES} == BROKER_KEYS.keys()


def test_partition_and_open_file_limits_default_to_rlimit_nofile():
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    config = BrokerConfig()
    assert config.max_partitions_per_broker() == (soft, f"derived from RLIMIT_NOFILE {soft}")
    assert config.max_open_segment_files() == (soft // 2,
                                                f"derived from RLIMIT_NOFILE {soft} / 2")
    config = BrokerConfig({"ringlog.max.partitions.per.broker": "7",
                           "ringlog.max.open.segment.files": "30"})
    assert config.max_partitions_per_broker() == (7, "configured")
    assert config.max_open_segment_files() == (30, "configured")
    with pytest.raises(InvalidConfigurationError, match=r"max.open.segment.files \(0\)"):
        BrokerConfig({"ringlog.max.open.segment.files": "0"})


def test_fetch_wait_above_lag_time_is_refused_like_kafka():
    with pytest.raises(InvalidConfigurationError,
                       match=r"replica.fetch.wait.max.ms \(600\).*replica.lag.time.max.ms \(500\)"):
        BrokerConfig({"replica.fetch.wait.max.ms": "600", "replica.lag.time.max.ms": "500"})


def test_ring_too_small_for_the_largest_batch_says_what_size_is_needed():
    props = {"ringlog.ring.bytes": str(1 << 20), "message.max.bytes": str(3 << 20)}
    with pytest.raises(InvalidConfigurationError, match="ringlog.ring.bytes") as info:
        BrokerConfig(props)
    needed = int(re.search(r"ringlog.ring.bytes >= (\d+)", str(info.value)).group(1))
    assert needed == 8 << 20
    BrokerConfig({**props, "ringlog.ring.bytes": str(needed)})  # the size it names is enough
    with pytest.raises(InvalidConfigurationError):
        BrokerConfig({**props, "ringlog.ring.bytes": str(needed // 2)})


# -- broker: the object ------------------------------------------------------------------------


def test_broker_config_is_a_read_only_dict():
    config = BrokerConfig()
    assert isinstance(config, dict) and type(config).__getitem__ is dict.__getitem__
    for mutate in (lambda: config.__setitem__("num.partitions", 2),
                   lambda: config.update({"num.partitions": 2}),
                   lambda: config.pop("num.partitions"),
                   lambda: config.setdefault("x", 1), config.clear, config.popitem,
                   lambda: config.__delitem__("num.partitions")):
        with pytest.raises(TypeError, match="read-only"):
            mutate()
    assert config["num.partitions"] == 1


def test_replace_builds_a_validated_copy(tmp_path):
    config = BrokerConfig({"num.partitions": "3"}, data_dir=tmp_path)
    other = config.replace({"broker.id": 1})
    assert (other["num.partitions"], other["broker.id"]) == (3, 1)
    assert other["log.dirs"] == str(tmp_path / "broker-1")
    assert config["broker.id"] == -1
    with pytest.raises(InvalidConfigurationError):
        config.replace({"num.partitions": "0"})


def test_broker_config_pickles(tmp_path):
    config = BrokerConfig({"broker.id": "1", "log.retention.minutes": "9"}, data_dir=tmp_path)
    copy = pickle.loads(pickle.dumps(config))
    assert copy == config and type(copy) is BrokerConfig
    assert copy.log_config() == config.log_config() and copy.data_dir == config.data_dir


# -- clients: defaults ----------------------------------------------------------------------------

# Defaults that differ from kafka-python's on purpose (see config_client's module doc).
DIFFERENT_FROM_KAFKA_PYTHON = {
    KafkaProducer: {"partitioner", "kafka_client", "selector", "socket_options",
                    "metric_reporters"},
    KafkaConsumer: {"client_id", "partition_assignment_strategy",
                    "default_offset_commit_callback", "kafka_client", "selector",
                    "socket_options", "metric_reporters"},
    KafkaAdminClient: {"client_id", "kafka_client", "selector", "socket_options",
                       "metric_reporters"},
}
CONFIGS = {KafkaProducer: ProducerConfig, KafkaConsumer: ConsumerConfig,
           KafkaAdminClient: AdminClientConfig}


@pytest.mark.parametrize("peer", list(CONFIGS), ids=lambda c: c.__name__)
def test_every_kafka_python_key_is_accepted_with_its_default(peer):
    ours = CONFIGS[peer].DEFAULT_CONFIG
    theirs = peer.DEFAULT_CONFIG
    assert theirs.keys() <= ours.keys(), theirs.keys() - ours.keys()
    differing = {k for k in theirs if ours[k] != theirs[k]}
    assert differing == DIFFERENT_FROM_KAFKA_PYTHON[peer]


def test_keys_beyond_kafka_python_are_kafkas_or_ringlogs():
    extra = ProducerConfig.DEFAULT_CONFIG.keys() - KafkaProducer.DEFAULT_CONFIG.keys()
    assert extra == {"buffer_memory", "ringlog_spin_iterations", "ringlog_park_timeout_ms"}
    assert ProducerConfig()["buffer_memory"] == 32 * 1024 * 1024  # Kafka's buffer.memory


def test_producer_defaults_normalized():
    config = ProducerConfig()
    assert config["acks"] == -1 and config["retries"] == math.inf
    assert config["enable_idempotence"] is True
    assert config["compression_type"] is None
    assert config["bootstrap_servers"] == ("localhost",)
    assert config["partitioner"] is None  # the producer builds its DefaultPartitioner
    assert config["client_id"] is None
    assert config["delivery_timeout_ms"] == 120000


def test_consumer_and_admin_defaults():
    consumer = ConsumerConfig()
    assert consumer["client_id"].startswith("ringlog-")
    assert consumer["partition_assignment_strategy"] == ("range", "roundrobin")
    assert consumer["auto_offset_reset"] == "latest"
    assert consumer["consumer_timeout_ms"] == math.inf
    assert consumer["session_timeout_ms"] == 45000  # Kafka's and kafka-python 3's
    assert AdminClientConfig()["request_timeout_ms"] == 30000


def test_client_wait_policy():
    policy = ConsumerConfig(ringlog_spin_iterations=3, **{"ringlog.park.timeout.ms": 20}
                            ).wait_policy()
    assert (policy.spin, policy.poll_interval) == (3, 0.02)


# -- clients: spellings ---------------------------------------------------------------------------

SPELLING_CASES = [
    (ProducerConfig, "batch_size", 32768),
    (ProducerConfig, "linger_ms", 5),
    (ProducerConfig, "buffer_memory", "1048576"),
    (ProducerConfig, "max_in_flight_requests_per_connection", 2),
    (ProducerConfig, "compression_type", "lz4"),
    (ProducerConfig, "acks", "1"),
    (ProducerConfig, "enable_idempotence", "false"),
    (ProducerConfig, "bootstrap_servers", "a:1,b:2"),
    (ConsumerConfig, "auto_offset_reset", "earliest"),
    (ConsumerConfig, "enable_auto_commit", False),
    (ConsumerConfig, "max_poll_records", 10),
    (ConsumerConfig, "isolation_level", "read_committed"),
    (ConsumerConfig, "partition_assignment_strategy",
     "org.apache.kafka.clients.consumer.StickyAssignor"),
    (AdminClientConfig, "request_timeout_ms", 1000),
    (AdminClientConfig, "ringlog_spin_iterations", 0),
]


def _comparable(config):
    return {k: v for k, v in config.items() if k != "partitioner"}


@pytest.mark.parametrize("cls, name, value", SPELLING_CASES)
def test_dotted_and_snake_spellings_agree(cls, name, value):
    snake = cls(**{name: value})
    dotted = cls(**{name.replace("_", "."): value})
    assert _comparable(snake) == _comparable(dotted)
    assert _comparable(snake) != _comparable(cls())  # the value was taken
    assert snake.provided == dotted.provided == {name: value}


def test_both_spellings_at_once_raise_naming_both():
    with pytest.raises(KafkaConfigurationError, match="batch_size=1.*batch.size=2"):
        ProducerConfig(batch_size=1, **{"batch.size": 2})


def test_client_config_from_a_properties_file():
    config = ProducerConfig(**parse_properties(
        "bootstrap.servers=h1:9092, h2:9092\nacks=1\nlinger.ms=5\nbatch.size=32768\n"
        "compression.type=zstd\nenable.idempotence=false\nretries=3\n"))
    assert config["bootstrap_servers"] == ("h1:9092", "h2:9092")
    assert (config["acks"], config["linger_ms"], config["batch_size"]) == (1, 5, 32768)
    assert (config["compression_type"], config["enable_idempotence"], config["retries"]) == (
        "zstd", False, 3)


# -- clients: validation --------------------------------------------------------------------------

def test_unknown_kwarg_raises_naming_it_with_a_hint():
    with pytest.raises(KafkaConfigurationError, match=r"'linger'.*did you mean 'linger_ms'"):
        ProducerConfig(linger=5)
    with pytest.raises(KafkaConfigurationError, match="'group_id'"):
        ProducerConfig(group_id="g")  # a consumer key


def test_a_dotted_unknown_key_gets_a_dotted_hint():
    # `--producer-property lingr.ms=5`: Kafka's spelling was used, so Kafka's is suggested
    with pytest.raises(KafkaConfigurationError, match=r"'lingr\.ms' \(did you mean "
                                                      r"'linger\.ms'\?\)"):
        ProducerConfig(**{"lingr.ms": 5})


BAD_CLIENT_VALUES = [
    (ProducerConfig, "acks", 2, "'all'"),
    (ProducerConfig, "acks", "2", "'all'"),
    (ProducerConfig, "acks", True, "'all'"),
    (ProducerConfig, "linger_ms", -1, ">= 0"),
    (ProducerConfig, "linger.ms", -1, ">= 0"),
    (ProducerConfig, "compression_type", "brotli", "'zstd'"),
    (ProducerConfig, "batch_size", "big", "integer"),
    (ProducerConfig, "batch_size", 1.5, "integer"),
    (ProducerConfig, "retries", -1, "inf"),
    (ProducerConfig, "buffer_memory", -1, ">= 0"),
    (ProducerConfig, "max_block_ms", "soon", "number"),
    (ProducerConfig, "max_request_size", -1, "2147483647"),
    (ProducerConfig, "max_in_flight_requests_per_connection", 0, "[1,"),
    (ProducerConfig, "request_timeout_ms", float("nan"), "number"),
    (ProducerConfig, "delivery_timeout_ms", -1, "number"),
    (ProducerConfig, "key_serializer", 5, "callable"),
    (ProducerConfig, "partitioner", 5, "'round_robin'"),
    (ProducerConfig, "partitioner", "murmur3", "'round_robin'"),
    (ProducerConfig, "enable_idempotence", "yes", "true or false"),
    (ProducerConfig, "transactional_id", 7, "string"),
    (ProducerConfig, "bootstrap_servers", [], "host[:port]"),
    (ProducerConfig, "bootstrap_servers", 9092, "host[:port]"),
    (ProducerConfig, "client_id", 5, "string"),
    (ConsumerConfig, "auto_offset_reset", "first", "'earliest', 'latest', 'none'"),
    (ConsumerConfig, "isolation_level", "serializable", "'read_committed'"),
    (ConsumerConfig, "fetch_min_bytes", -1, "[0,"),
    (ConsumerConfig, "fetch_max_bytes", -1, "[0,"),
    (ConsumerConfig, "max_partition_fetch_bytes", "1MB", "integer"),
    (ConsumerConfig, "max_poll_records", 0, "[1,"),
    (ConsumerConfig, "max_poll_interval_ms", 0, "[1,"),
    (ConsumerConfig, "session_timeout_ms", 0, "[1,"),
    (ConsumerConfig, "enable_auto_commit", "yes", "true or false"),
    (ConsumerConfig, "check_crcs", None, "true or false"),
    (ConsumerConfig, "consumer_timeout_ms", -1, "inf"),
    (ConsumerConfig, "partition_assignment_strategy", ["stickier"], "'sticky'"),
    (ConsumerConfig, "partition_assignment_strategy", [], "non-empty"),
    (ConsumerConfig, "partition_assignment_strategy", [object()], "name"),
    (ConsumerConfig, "value_deserializer", "json", "deserialize"),
    (ConsumerConfig, "default_offset_commit_callback", 1, "callable"),
    (ConsumerConfig, "group_id", 12, "string"),
    (ConsumerConfig, "group_instance_id", "a b", "249"),
    (ConsumerConfig, "group_instance_id", "..", "249"),
    (AdminClientConfig, "ringlog_spin_iterations", -1, "[0,"),
    (AdminClientConfig, "ringlog.park.timeout.ms", 0, "[1,"),
    (AdminClientConfig, "metadata_max_age_ms", -5, ">= 0"),
    (AdminClientConfig, "retry_backoff_ms", "x", "number"),
]


@pytest.mark.parametrize("cls, name, raw, allowed", BAD_CLIENT_VALUES)
def test_every_bad_client_value_names_key_value_and_allowed(cls, name, raw, allowed):
    with pytest.raises(KafkaConfigurationError) as info:
        cls(**{name: raw})
    message = str(info.value)
    assert f"{cls.KIND} config {name!r}" in message, message
    assert repr(raw) in message, message
    assert allowed in message, message


# -- clients: normalization and rules between keys -----------------------------------------------

@pytest.mark.parametrize("raw, acks", [("all", -1), (-1, -1), ("-1", -1), (0, 0), ("1", 1),
                                       (" all ", -1)])
def test_acks_normalized(raw, acks):
    assert ProducerConfig(acks=raw, enable_idempotence=False)["acks"] == acks


@pytest.mark.parametrize("raw, codec", [(None, None), ("none", None), ("NONE", None),
                                        ("gzip", "gzip"), ("Snappy", "snappy"), ("lz4", "lz4"),
                                        ("zstd", "zstd")])
def test_compression_type_normalized(raw, codec):
    assert ProducerConfig(compression_type=raw)["compression_type"] == codec


def test_partitioner_names_are_the_built_ins():
    assert set(PARTITIONER_NAMES) == set(PARTITIONERS)


def test_partitioner_resolved():
    assert isinstance(resolve_partitioner(ProducerConfig(partitioner="round_robin")["partitioner"]),
                      RoundRobinPartitioner)
    chooser = ProducerConfig(partitioner=lambda key, all_, available: all_[0])["partitioner"]
    assert isinstance(resolve_partitioner(chooser), CallablePartitioner)
    default = ProducerConfig()["partitioner"]
    assert isinstance(resolve_partitioner(default), DefaultPartitioner)
    assert resolve_partitioner(default) is not resolve_partitioner(default)  # one per producer


class CustomAssignor:
    name = "mine"


def test_assignors_normalized():
    strategy = ConsumerConfig(partition_assignment_strategy=(
        RoundRobinPartitionAssignor, "org.apache.kafka.clients.consumer.RangeAssignor",
        CustomAssignor, "sticky"))["partition_assignment_strategy"]
    assert strategy == ("roundrobin", "range", CustomAssignor, "sticky")
    assert ConsumerConfig(partition_assignment_strategy="range, sticky")[
        "partition_assignment_strategy"] == ("range", "sticky")
    assert ConsumerConfig(partition_assignment_strategy=[RangePartitionAssignor])[
        "partition_assignment_strategy"] == ("range",)


def test_deprecated_offset_reset_names_map_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        assert ConsumerConfig(auto_offset_reset="smallest")["auto_offset_reset"] == "earliest"
        assert ConsumerConfig(auto_offset_reset="largest")["auto_offset_reset"] == "latest"
    assert "deprecated" in caplog.text


def test_serializers_accept_callables_and_serializer_objects():
    class Json:
        def serialize(self, topic, headers, data):
            return b"{}"

    config = ProducerConfig(key_serializer=str.encode, value_serializer=Json())
    assert config["key_serializer"] is str.encode
    assert isinstance(config["value_serializer"], Json)


def test_conflicting_key_turns_default_idempotence_off_logged_at_info(caplog):
    with caplog.at_level(logging.INFO):
        config = ProducerConfig(acks=1)
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert config["enable_idempotence"] is False and config["acks"] == 1
    assert "acks=1" in caplog.text
    assert ProducerConfig(max_in_flight_requests_per_connection=6)["enable_idempotence"] is False
    assert ProducerConfig(retries=0)["enable_idempotence"] is False
    assert ProducerConfig(acks="all", retries=3)["enable_idempotence"] is True


@pytest.mark.parametrize("configs, named", [
    ({"enable_idempotence": True, "acks": 0}, "acks=0"),
    ({"enable_idempotence": True, "retries": 0}, "retries=0"),
    ({"enable_idempotence": "true", "max.in.flight.requests.per.connection": 6},
     "max.in.flight.requests.per.connection=6"),
    ({"transactional_id": "tx", "acks": 1}, "acks=1"),
    ({"transactional_id": "tx", "enable_idempotence": False}, "enable_idempotence=True"),
])
def test_explicit_idempotence_conflicts_raise_naming_the_keys(configs, named):
    with pytest.raises(KafkaConfigurationError, match=re.escape(named)):
        ProducerConfig(**configs)


def test_transactional_id_turns_idempotence_on():
    assert ProducerConfig(transactional_id="tx")["enable_idempotence"] is True


def test_delivery_timeout_rule_is_kafkas(caplog):
    with caplog.at_level(logging.WARNING):
        config = ProducerConfig(linger_ms=100000)
    assert config["delivery_timeout_ms"] == 100000 + 30000  # raised to the floor
    assert "delivery_timeout_ms" in caplog.text
    with pytest.raises(KafkaConfigurationError,
                       match=r"delivery_timeout_ms \(1000\).*linger_ms \+ request_timeout_ms "
                             r"\(0 \+ 30000\)"):
        ProducerConfig(delivery_timeout_ms=1000)


def test_consumer_timeouts_must_be_ordered_like_kafka_python():
    with pytest.raises(KafkaConfigurationError,
                       match=r"request_timeout_ms \(400\).*fetch_max_wait_ms \(500\)"):
        ConsumerConfig(request_timeout_ms=400)
    with pytest.raises(KafkaConfigurationError, match=r"connections_max_idle_ms \(1000\)"):
        ConsumerConfig(connections_max_idle_ms=1000)


def test_heartbeat_must_be_below_session_timeout_in_a_group(caplog):
    with pytest.raises(KafkaConfigurationError,
                       match=r"heartbeat_interval_ms \(10000\).*session_timeout_ms \(10000\)"):
        ConsumerConfig(group_id="g", session_timeout_ms=10000, heartbeat_interval_ms=10000)
    ConsumerConfig(session_timeout_ms=10000, heartbeat_interval_ms=10000)  # no group: no rule
    with caplog.at_level(logging.WARNING):
        ConsumerConfig(group_id="g", session_timeout_ms=9000, heartbeat_interval_ms=4000)
    assert "a third of session_timeout_ms" in caplog.text


def test_group_instance_id_needs_a_group():
    with pytest.raises(KafkaConfigurationError, match="group_instance_id='m1'.*group_id"):
        ConsumerConfig(group_instance_id="m1")
    assert ConsumerConfig(group_id="g", group_instance_id="m-1.a_b")["group_instance_id"] == (
        "m-1.a_b")


# -- clients: the object -------------------------------------------------------------------------

def test_client_config_is_a_read_only_dict():
    config = ConsumerConfig(group_id="g")
    assert type(config).__getitem__ is dict.__getitem__
    with pytest.raises(TypeError, match="read-only"):
        config["group_id"] = "h"
    with pytest.raises(TypeError, match="read-only"):
        config |= {"group_id": "h"}
    assert config["group_id"] == "g"


def test_client_replace_accepts_either_spelling_and_revalidates():
    config = ConsumerConfig(group_id="g", max_poll_records=5)
    other = config.replace(**{"max.poll.records": 7})
    assert (other["group_id"], other["max_poll_records"]) == ("g", 7)
    assert config["max_poll_records"] == 5
    with pytest.raises(KafkaConfigurationError, match="'max_poll_records'"):
        config.replace(max_poll_records=0)


def test_client_config_pickles():
    config = ConsumerConfig(group_id="g", **{"fetch.max.bytes": 1000})
    copy = pickle.loads(pickle.dumps(config))
    assert copy == config and type(copy) is ConsumerConfig
    assert copy.provided == {"group_id": "g", "fetch_max_bytes": 1000}
