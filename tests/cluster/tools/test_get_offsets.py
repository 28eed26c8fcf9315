"""``ringlog get-offsets`` against a real one-broker cluster: Kafka's ``topic:partition:offset``
lines for latest, earliest and a timestamp, its partition filters, and its errors."""
from __future__ import annotations

import time

import pytest

from cluster.admin.kafka_admin_client import KafkaAdminClient, NewTopic
from cluster.producer.kafka_producer import KafkaProducer
from cluster.tools import get_offsets
from cluster.tools.support import ToolError
from tests.support.tools import run_tool, tool_cluster

cluster = tool_cluster(brokers=1)

#: Record timestamps of partition 0 of "offsets": recent, so retention keeps them.
BASE_MS = (int(time.time()) - 3600) * 1000
TIMES = (BASE_MS, BASE_MS + 1000, BASE_MS + 2000)


@pytest.fixture(scope="module")
def topic(cluster):
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("offsets", 2, 1), NewTopic("other", 1, 1)])
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        for ts in TIMES:
            producer.send("offsets", b"v", partition=0, timestamp_ms=ts)
        producer.send("other", b"v", partition=0)
        producer.flush(timeout=10)
    return "offsets"


def offsets(cluster, capsys, *argv):
    code = run_tool(get_offsets, "--bootstrap-server", cluster.bootstrap_servers, *argv)
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


@pytest.mark.multiprocess
def test_latest_earliest_and_time(cluster, topic, capsys):
    assert offsets(cluster, capsys, "--topic", topic) == (
        0, ["offsets:0:3", "offsets:1:0"], "")
    assert offsets(cluster, capsys, "--topic", topic, "--time", "-1") == (
        0, ["offsets:0:3", "offsets:1:0"], "")
    for earliest in ("earliest", "-2"):
        assert offsets(cluster, capsys, "--topic", topic, "--time", earliest) == (
            0, ["offsets:0:0", "offsets:1:0"], "")
    # The first offset at or after the time; a partition with none prints no line.
    assert offsets(cluster, capsys, "--topic", topic, "--time", TIMES[1]) == (
        0, ["offsets:0:1"], "")
    assert offsets(cluster, capsys, "--topic", topic, "--time", TIMES[1] - 1) == (
        0, ["offsets:0:1"], "")
    assert offsets(cluster, capsys, "--topic", topic, "--time", TIMES[2] + 1) == (0, [], "")


@pytest.mark.multiprocess
def test_partition_filters(cluster, topic, capsys):
    assert offsets(cluster, capsys, "--topic", topic, "--partitions", "1") == (
        0, ["offsets:1:0"], "")
    assert offsets(cluster, capsys, "--topic-partitions", "offsets:1-,other") == (
        0, ["offsets:1:0", "other:0:1"], "")
    assert offsets(cluster, capsys, "--topic-partitions", "off.*:-1") == (
        0, ["offsets:0:3"], "")
    assert offsets(cluster, capsys)[1] == ["offsets:0:3", "offsets:1:0", "other:0:1"]


@pytest.mark.multiprocess
def test_errors_are_one_line(cluster, topic, capsys):
    code, out, err = offsets(cluster, capsys, "--topic", "nothing-like-it")
    assert (code, out) == (1, [])
    assert err == "Error occurred: Could not match any topic-partitions with the specified " \
                  "filters\n"
    code, _, err = offsets(cluster, capsys, "--topic-partitions", "a", "--topic", "a")
    assert (code, err) == (1, "Error occurred: --topic-partitions cannot be used with --topic "
                              "or --partitions\n")
    code, _, err = offsets(cluster, capsys, "--topic", topic, "--partitions", "x")
    assert code == 1 and "received: x" in err


@pytest.mark.parametrize("raw, expected", [
    ("latest", -1), ("-1", -1), ("earliest", -2), ("-2", -2), ("1700000000000", 1700000000000),
])
def test_parse_time(raw, expected):
    assert get_offsets.parse_time(raw) == expected


@pytest.mark.parametrize("raw, message", [
    ("yesterday", "Malformed time argument yesterday."),
    ("-7", "Malformed time argument -7."),
    ("max-timestamp", "--time max-timestamp: needs ListOffsets v7"),
    ("-3", "--time -3: needs ListOffsets v7"),
])
def test_parse_time_refuses(raw, message):
    with pytest.raises(ToolError, match=message):
        get_offsets.parse_time(raw)


def test_rules_follow_kafkas_pattern():
    rules = get_offsets.parse_rules("t:1,u:2-4,:5-,v")
    assert [bool(p.fullmatch("t")) for p, _ in rules] == [True, False, True, False]
    assert [[n for n in range(8) if n in ids] for _, ids in rules] == [
        [1], [2, 3], [5, 6, 7], list(range(8))]
    with pytest.raises(ToolError, match="Invalid rule specification: t:x"):
        get_offsets.parse_rules("t:x")
