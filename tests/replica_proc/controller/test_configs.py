"""The controller's AlterConfigs and IncrementalAlterConfigs: config records in the metadata
log, the image every broker applies, and Kafka's refusals naming the key and the value."""
from __future__ import annotations

import pytest

from cluster.config import BrokerConfig
from cluster.config.dynamic import (
    AlterConfigOp,
    ConfigResourceType,
    ConfigSource,
    describe_broker,
    describe_topic,
    effective_broker_config,
)
from cluster.errors import (
    InvalidConfigurationError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)
from tests.replica_proc.controller.env import Env

TOPIC, BROKER = ConfigResourceType.TOPIC, ConfigResourceType.BROKER
SET, DELETE, APPEND, SUBTRACT = (AlterConfigOp.SET, AlterConfigOp.DELETE, AlterConfigOp.APPEND,
                                 AlterConfigOp.SUBTRACT)
OK = (0, None)


@pytest.fixture
def controller(env):
    """Two live brokers and broker 0's controller, active, with topic "t"."""
    for b in range(2):
        env.start_broker(b)
    active = env.controller(0)
    env.poll(active)
    assert active.create_topics([{"name": "t", "num_partitions": 2, "configs": {
        "cleanup.policy": "delete"}}]) == {"t": OK}
    return active


def test_incremental_changes_only_the_keys_given(env, controller):
    assert controller.alter_configs([(TOPIC, "t", [("retention.ms", SET, "60000"),
                                                   ("segment.bytes", SET, "2048")])]) == {
        (TOPIC, "t"): OK}
    assert env.page.read().topics["t"].configs == {
        "cleanup.policy": "delete", "retention.ms": "60000", "segment.bytes": "2048"}
    assert controller.alter_configs([(TOPIC, "t", [("retention.ms", DELETE, None),
                                                   ("cleanup.policy", APPEND, "compact")])]) == {
        (TOPIC, "t"): OK}
    assert env.page.read().topics["t"].configs == {
        "cleanup.policy": "delete,compact", "segment.bytes": "2048"}
    controller.alter_configs([(TOPIC, "t", [("cleanup.policy", SUBTRACT, "delete")])])
    assert env.page.read().topics["t"].configs["cleanup.policy"] == "compact"


def test_legacy_alter_configs_replaces_every_dynamic_config(env, controller):
    assert controller.alter_configs([(TOPIC, "t", [("retention.ms", SET, "1000")])],
                                    replace=True) == {(TOPIC, "t"): OK}
    assert env.page.read().topics["t"].configs == {"retention.ms": "1000"}


def test_changes_survive_a_new_controller(env, controller):
    controller.alter_configs([(TOPIC, "t", [("segment.bytes", SET, "4096")]),
                              (BROKER, "", [("log.retention.ms", SET, "5000")]),
                              (BROKER, "1", [("log.segment.bytes", SET, "8192")])])
    before = env.page.read()
    controller.close()
    successor = env.controller(1)
    after = env.poll(successor)
    assert after.topics["t"].configs == before.topics["t"].configs
    assert after.broker_configs == {"": {"log.retention.ms": "5000"},
                                    "1": {"log.segment.bytes": "8192"}}


def test_validate_only_changes_nothing(env, controller):
    version = env.page.read().version
    assert controller.alter_configs([(TOPIC, "t", [("retention.ms", SET, "7")])],
                                    validate_only=True) == {(TOPIC, "t"): OK}
    assert env.page.read().version == version


@pytest.mark.parametrize("resource, error, words", [
    ((TOPIC, "t", [("retention.ms", SET, "soon")]), InvalidConfigurationError,
     ["'soon'", "'retention.ms'"]),
    ((TOPIC, "t", [("no.such.key", SET, "1")]), InvalidConfigurationError,
     ["'no.such.key'", "'1'"]),
    ((TOPIC, "t", [("segment.bytes", SET, "1")]), InvalidConfigurationError,
     ["'segment.bytes'", "'1'", "[14, 2147483647]"]),
    ((TOPIC, "t", [("retention.ms", APPEND, "5")]), InvalidConfigurationError,
     ["'retention.ms'", "not a list"]),
    ((TOPIC, "nope", [("retention.ms", SET, "5")]), UnknownTopicOrPartitionError, ["'nope'"]),
    ((TOPIC, "t", [("retention.ms", SET, "5"), ("retention.ms", DELETE, None)]),
     InvalidRequestError, ["duplicate", "retention.ms"]),
    ((TOPIC, "t", [("retention.ms", 9, "5")]), InvalidRequestError, ["operation 9"]),
    ((BROKER, "0", [("num.partitions", SET, "3")]), InvalidConfigurationError,
     ["'num.partitions'", "'3'", "read-only"]),
    ((BROKER, "0", [("no.such.key", SET, "3")]), InvalidConfigurationError,
     ["unknown broker config 'no.such.key'"]),
    ((BROKER, "", [("log.segment.bytes", SET, "-5")]), InvalidConfigurationError,
     ["'log.segment.bytes'", "'-5'"]),
    ((BROKER, "zero", [("log.segment.bytes", SET, "4096")]), InvalidRequestError,
     ["'zero'"]),
    ((BROKER, "", [("message.max.bytes", SET, str(64 << 20))]), InvalidConfigurationError,
     ["ringlog.ring.bytes", "message.max.bytes"]),
    ((8, "0", [("kafka", SET, "DEBUG")]), InvalidRequestError, ["resource type 8"]),
])
def test_refusals_carry_kafkas_code_and_name_the_key_and_value(env, controller, resource,
                                                              error, words):
    version = env.page.read().version
    (result,) = controller.alter_configs([resource]).values()
    code, message = result
    assert code == error.errno
    for word in words:
        assert word in message
    assert env.page.read().version == version


def test_a_bad_resource_does_not_stop_the_others(env, controller):
    results = controller.alter_configs([(TOPIC, "nope", [("retention.ms", SET, "5")]),
                                        (TOPIC, "t", [("retention.ms", SET, "5")]),
                                        (TOPIC, "t", [("retention.ms", SET, "6")])])
    assert results[(TOPIC, "nope")][0] == UnknownTopicOrPartitionError.errno
    assert results[(TOPIC, "t")][0] == InvalidRequestError.errno  # named twice
    controller.alter_configs([(TOPIC, "nope", [("retention.ms", SET, "5")]),
                              (TOPIC, "t", [("retention.ms", SET, "5")])])
    assert env.page.read().topics["t"].configs["retention.ms"] == "5"


# -- what brokers run with and what DescribeConfigs shows ------------------------------------

def test_per_broker_over_cluster_default_over_static():
    static = BrokerConfig({"broker.id": 1, "log.segment.bytes": "100000"})
    dynamic = {"": {"log.segment.bytes": "20000", "log.retention.ms": "9000"},
               "1": {"log.segment.bytes": "30000"}}
    assert effective_broker_config(static, dynamic, 1).log_config().segment_bytes == 30000
    assert effective_broker_config(static, dynamic, 2).log_config().segment_bytes == 20000
    assert effective_broker_config(static, dynamic, 1).log_config().retention_ms == 9000
    assert effective_broker_config(static, {}, 1) is static


def test_describe_gives_kafkas_sources_and_synonyms():
    static = BrokerConfig({"broker.id": 1, "log.segment.bytes": "100000"})
    dynamic = {"": {"log.segment.bytes": "20000"}}
    entries = {e.name: e for e in describe_topic(static, dynamic, 1, {"retention.ms": "60000"})}
    assert entries["retention.ms"].value == "60000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    # log.retention.ms is not set: its lower synonyms are dropped, as Kafka's configSynonyms.
    assert [s.source for s in entries["retention.ms"].synonyms] == [
        ConfigSource.DYNAMIC_TOPIC_CONFIG]
    segment = entries["segment.bytes"]
    assert (segment.value, segment.source) == ("20000",
                                               ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in segment.synonyms] == [
        ("log.segment.bytes", "20000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.segment.bytes", "100000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.segment.bytes", str(1 << 30), ConfigSource.DEFAULT_CONFIG)]
    broker = {e.name: e for e in describe_broker(static, dynamic, 1)}
    assert broker["log.segment.bytes"].value == "20000"
    assert not broker["log.segment.bytes"].read_only and broker["num.partitions"].read_only
    assert [(e.name, e.value, e.source) for e in
            describe_broker(static, dynamic, 1, cluster_default=True)] == [
        ("log.segment.bytes", "20000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]


def test_configs_that_would_overflow_the_metadata_page_are_refused(tmp_path):
    small = Env(tmp_path, page_size=8192)
    try:
        small.start_broker(0)
        active = small.controller(0)
        small.poll(active)
        active.create_topics([{"name": "t", "num_partitions": 1}])
        version = small.page.read().version
        huge = ",".join(["delete"] * 2000)  # valid, and kept as given
        ((code, message),) = active.alter_configs(
            [(TOPIC, "t", [("cleanup.policy", SET, huge)])]).values()
        assert code == InvalidConfigurationError.errno
        assert "metadata page" in message and "topic 't'" in message
        assert small.page.read().version == version
    finally:
        small.close()
