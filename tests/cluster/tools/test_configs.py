"""``ringlog configs`` against a real two-broker cluster: alter a topic's and the brokers'
dynamic configs, describe them with Kafka's lines, see the brokers' logs obey them without a
restart, and Kafka's one-line errors with the code."""
from __future__ import annotations

import glob
import os

import pytest

from cluster.admin.kafka_admin_client import (
    ConfigResource,
    KafkaAdminClient,
    NewTopic,
)
from cluster.config.dynamic import ConfigResourceType
from cluster.errors import InvalidRequestError
from cluster.producer.kafka_producer import KafkaProducer
from cluster.tools import configs, topics
from cluster.tools.support import ToolError
from tests.support.tools import run_tool, tool_cluster

cluster = tool_cluster(brokers=2)


def config_tool(cluster, capsys, *argv):
    code = run_tool(configs, "--bootstrap-server", cluster.bootstrap_servers, *argv)
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def create(cluster, name):
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(name, 1, 1)])
    return cluster.metadata().topics[name].partitions[0].leader


def segments(cluster, topic, leader):
    return len(glob.glob(os.path.join(cluster.data_dir, f"broker-{leader}", f"{topic}-0",
                                      "*.log")))


def produce(cluster, topic, count=12, size=200):
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        for _ in range(count):
            producer.send(topic, b"x" * size)
            producer.flush(timeout=10)  # one batch each


@pytest.mark.multiprocess
def test_topic_configs_apply_without_a_restart(cluster, capsys):
    leader = create(cluster, "rolling")
    pids = cluster.pids()
    produce(cluster, "rolling", count=3)
    assert segments(cluster, "rolling", leader) == 1
    assert config_tool(cluster, capsys, "--entity-type", "topics", "--entity-name", "rolling",
                       "--alter", "--add-config", "segment.bytes=1024,retention.ms=3600000") == (
        0, ["Completed updating config for topic rolling."], "")
    assert config_tool(cluster, capsys, "--topic", "rolling", "--describe") == (0, [
        "Dynamic configs for topic rolling are:",
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms="
        "3600000}",
        "  segment.bytes=1024 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=1024,"
        " DEFAULT_CONFIG:log.segment.bytes=1073741824}"], "")
    produce(cluster, "rolling")
    assert segments(cluster, "rolling", leader) >= 3  # rolled at the new size
    assert cluster.pids() == pids

    assert config_tool(cluster, capsys, "--topic", "rolling", "--alter", "--delete-config",
                       "segment.bytes") == (0, ["Completed updating config for topic rolling."],
                                            "")
    code, out, _ = config_tool(cluster, capsys, "--topic", "rolling", "--describe")
    assert out == ["Dynamic configs for topic rolling are:",
                   "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
                   "retention.ms=3600000}"]
    before = segments(cluster, "rolling", leader)
    produce(cluster, "rolling", count=6)
    assert segments(cluster, "rolling", leader) <= before + 1  # back to 1 GiB segments
    code, out, _ = config_tool(cluster, capsys, "--topic", "rolling", "--describe", "--all")
    assert "  segment.bytes=1073741824 sensitive=false synonyms={DEFAULT_CONFIG:" \
           "log.segment.bytes=1073741824}" in out


@pytest.mark.multiprocess
def test_broker_defaults_apply_to_every_log(cluster, capsys):
    leader = create(cluster, "defaults")
    assert config_tool(cluster, capsys, "--broker-defaults", "--alter", "--add-config",
                       "log.segment.bytes=1024") == (
        0, ["Completed updating default config for brokers in the cluster."], "")
    try:
        produce(cluster, "defaults")
        assert segments(cluster, "defaults", leader) >= 3
        # kafka-topics shows the configs not at Kafka's default, the brokers' ones included.
        assert run_tool(topics, "--bootstrap-server", cluster.bootstrap_servers, "--describe",
                        "--topic", "defaults") == 0
        assert capsys.readouterr().out.splitlines()[0].endswith(
            "\tConfigs: segment.bytes=1024")
        code, out, _ = config_tool(cluster, capsys, "--entity-type", "brokers", "--describe")
        assert out == [
            "Dynamic configs for broker 0 are:", "Dynamic configs for broker 1 are:",
            "Default configs for brokers in the cluster are:",
            "  log.segment.bytes=1024 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
            "log.segment.bytes=1024}"]
        assert config_tool(cluster, capsys, "--broker", "1", "--alter", "--add-config",
                           "log.retention.ms=7200000")[0] == 0
        code, out, _ = config_tool(cluster, capsys, "--broker", "1", "--describe")
        assert out == ["Dynamic configs for broker 1 are:",
                       "  log.retention.ms=7200000 sensitive=false synonyms={"
                       "DYNAMIC_BROKER_CONFIG:log.retention.ms=7200000, "
                       "DEFAULT_CONFIG:log.retention.hours=168}"]
    finally:
        assert config_tool(cluster, capsys, "--broker-defaults", "--alter", "--delete-config",
                           "log.segment.bytes")[0] == 0


@pytest.mark.multiprocess
@pytest.mark.parametrize("argv, error", [
    (["--topic", "bad", "--alter", "--add-config", "retention.ms=soon"],
     "Error while executing config command : InvalidConfigurationError: [Error 40] topic "
     "'bad': invalid value 'soon' for topic config 'retention.ms': expected an integer"),
    (["--topic", "bad", "--alter", "--add-config", "retention.bytes=1,nope=2"],
     "Error while executing config command : InvalidConfigurationError: [Error 40] topic "
     "'bad': unknown topic config 'nope' (value '2'); known: "),
    (["--topic", "missing", "--alter", "--add-config", "retention.ms=1"],
     "Error while executing config command : UnknownTopicOrPartitionError: [Error 3] topic "
     "'missing' does not exist\n"),  # the topic named once
    (["--broker", "0", "--alter", "--add-config", "num.partitions=3"],
     "Error while executing config command : InvalidConfigurationError: [Error 40] broker 0: "
     "cannot update broker config 'num.partitions' (value '3') dynamically: it is read-only"),
    (["--topic", "bad", "--alter", "--delete-config", "retention.ms"],
     "Error while executing config command : InvalidConfigurationError: [Error 40] Invalid "
     "config(s): retention.ms"),
])
def test_bad_keys_and_values_are_one_line_with_the_code(cluster, capsys, argv, error):
    if "bad" not in cluster.metadata().topics:
        create(cluster, "bad")
    code, out, err = config_tool(cluster, capsys, *argv)
    assert (code, out) == (1, [])
    assert err.startswith(error) and err.count("\n") == 1
    assert cluster.metadata().topics["bad"].configs == {}


@pytest.mark.multiprocess
def test_admin_client_describes_a_broker_at_that_broker(cluster):
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        (result,) = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, "1", ["broker.id", "num.partitions"])])
        assert [(c["name"], c["value"], c["read_only"]) for c in result["configs"]] == [
            ("broker.id", "1", True), ("num.partitions", "1", True)]
        with pytest.raises(InvalidRequestError, match="Broker id must be an integer"):
            admin.describe_configs([ConfigResource("BROKER", "one")])


@pytest.mark.parametrize("raw, expected", [
    ("a=1", {"a": "1"}),
    ("a = 1, b=x", {"a": "1", "b": "x"}),
    ("cleanup.policy=[compact,delete],retention.ms=5", {"cleanup.policy": "compact,delete",
                                                        "retention.ms": "5"}),
])
def test_add_config_is_parsed_as_kafka_does(raw, expected):
    assert configs.parse_add_config(raw) == expected


def test_add_config_without_a_value_is_refused():
    with pytest.raises(ToolError, match="must be in the format \"key=val\", found 'a'"):
        configs.parse_add_config("a")


@pytest.mark.parametrize("argv, message", [
    (["--describe"], "exactly one entity must be given"),
    (["--entity-name", "t", "--describe"], "--entity-type must be specified"),
    (["--entity-type", "topics", "--alter", "--add-config", "a=1"],
     "an entity name must be specified with --alter"),
    (["--topic", "t", "--alter"], "At least one of --add-config or --delete-config"),
    (["--topic", "t", "--describe", "--add-config", "a=1"], "can only be used with --alter"),
    (["--broker", "x", "--describe"], "must be a valid integer broker id, but it is: x"),
])
def test_usage_errors_need_no_cluster(tmp_path, capsys, argv, message):
    assert run_tool(configs, "--bootstrap-server", tmp_path, *argv) == 1
    assert message in capsys.readouterr().err
