"""``ringlog topics`` against a real two-broker cluster: create, list, describe (Kafka's
lines), alter, delete, and Kafka's errors naming the topic, with exit code 1."""
from __future__ import annotations

import re

import pytest

from cluster.metadata import data_dir as dd
from cluster.tools import topics
from tests.support.tools import run_tool, tool_cluster

# Every test uses the module's real cluster (broker processes).
pytestmark = pytest.mark.multiprocess

cluster = tool_cluster(brokers=2)


def topic_tool(cluster, *argv):
    return run_tool(topics, "--bootstrap-server", cluster.bootstrap_servers, *argv)


def test_create_list_describe(cluster, capsys):
    assert topic_tool(cluster, "--create", "--topic", "orders", "--partitions", 3,
                      "--replication-factor", 1, "--config", "retention.ms=60000",
                      "--config", "cleanup.policy = delete") == 0
    assert capsys.readouterr().out == "Created topic orders.\n"
    assert topic_tool(cluster, "--list") == 0
    assert "orders" in capsys.readouterr().out.splitlines()

    assert topic_tool(cluster, "--describe", "--topic", "orders") == 0
    info = cluster.metadata().topics["orders"]
    expected = [f"Topic: orders\tTopicId: {info.topic_id}\tPartitionCount: 3\t"
                f"ReplicationFactor: 1\tConfigs: cleanup.policy=delete,retention.ms=60000"]
    expected += [f"\tTopic: orders\tPartition: {p.partition}\tLeader: {p.leader}\t"
                 f"Replicas: {p.replicas[0]}\tIsr: {p.isr[0]}" for p in info.partitions]
    assert capsys.readouterr().out.splitlines() == expected
    assert {p.leader for p in info.partitions} == {0, 1}  # spread over both brokers


def test_describe_and_list_take_a_regular_expression(cluster, capsys):
    for name in ("app.a", "app.b", "web"):
        assert topic_tool(cluster, "--create", "--topic", name, "--partitions", 1) == 0
    capsys.readouterr()
    assert topic_tool(cluster, "--list", "--topic", r"app\..*") == 0
    assert capsys.readouterr().out.splitlines() == ["app.a", "app.b"]
    assert topic_tool(cluster, "--list", "--topic", r"app\..*", "--exclude-internal") == 0
    assert capsys.readouterr().out.splitlines() == ["app.a", "app.b"]
    assert topic_tool(cluster, "--describe", "--topic", "app.a,web") == 0
    described = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()
                 if line.startswith("Topic:")]
    assert described == ["Topic: app.a", "Topic: web"]


def test_create_an_existing_topic(cluster, capsys):
    assert topic_tool(cluster, "--create", "--topic", "twice", "--partitions", 1) == 0
    capsys.readouterr()
    assert topic_tool(cluster, "--create", "--topic", "twice", "--partitions", 1) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("Error while executing topic command : ")
    assert "TopicAlreadyExistsError" in captured.err and "'twice'" in captured.err
    assert topic_tool(cluster, "--create", "--topic", "twice", "--if-not-exists") == 0
    assert capsys.readouterr() == ("", "")


def test_invalid_topic_names_are_named(cluster, capsys):
    assert topic_tool(cluster, "--create", "--topic", "bad/name", "--partitions", 1) == 1
    err = capsys.readouterr().err
    assert "InvalidTopicError" in err and "'bad/name'" in err
    long_name = "x" * 250
    assert topic_tool(cluster, "--create", "--topic", long_name) == 1
    assert "250 characters" in capsys.readouterr().err


def test_bad_partitions_and_replication_factors(cluster, capsys):
    assert topic_tool(cluster, "--create", "--topic", "p0", "--partitions", 0) == 1
    assert capsys.readouterr().err == "The partitions must be greater than 0, found 0\n"
    assert topic_tool(cluster, "--create", "--topic", "r0", "--replication-factor", 0) == 1
    assert "The replication factor must be between 1 and 32767 inclusive" in \
        capsys.readouterr().err
    assert topic_tool(cluster, "--create", "--topic", "r3", "--replication-factor", 3) == 1
    err = capsys.readouterr().err
    assert "InvalidReplicationFactorError" in err and "'r3'" in err and "3" in err
    assert "r3" not in cluster.metadata().topics


def test_more_partitions_than_a_broker_can_host_is_one_line_and_creates_nothing(
        cluster, capsys):
    # The command: 100,000 partitions ran both brokers out of file descriptors.
    assert topic_tool(cluster, "--create", "--topic", "huge", "--partitions", 100_000) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert re.fullmatch(
        r"Error while executing topic command : PolicyViolationError: \[Error 44\] "
        r"(?:topic 'huge': )+broker \d would host \d+ partition replicas, more than "
        r"ringlog.max.partitions.per.broker (\d+) \(derived from RLIMIT_NOFILE \1\)\n",
        captured.err), captured.err
    assert "huge" not in cluster.metadata().topics
    assert topic_tool(cluster, "--create", "--topic", "small", "--partitions", 2) == 0
    assert topic_tool(cluster, "--alter", "--topic", "small", "--partitions", 100_000) == 1
    assert "PolicyViolationError: [Error 44] topic 'small'" in capsys.readouterr().err
    assert len(cluster.metadata().topics["small"].partitions) == 2


def test_topic_configs_are_checked(cluster, capsys):
    assert topic_tool(cluster, "--create", "--topic", "c1", "--config", "retention.ms") == 1
    assert "all configs to be added must be in the format \"key=val\"" in \
        capsys.readouterr().err
    assert topic_tool(cluster, "--create", "--topic", "c2", "--config", "no.such.key=1") == 1
    err = capsys.readouterr().err
    assert "'c2'" in err and "no.such.key" in err


def test_replica_assignment(cluster, capsys):
    assert topic_tool(cluster, "--create", "--topic", "placed",
                      "--replica-assignment", "1,0,1") == 0
    capsys.readouterr()
    leaders = [p.leader for p in cluster.metadata().topics["placed"].partitions]
    assert leaders == [1, 0, 1]
    assert topic_tool(cluster, "--create", "--topic", "dup", "--replica-assignment", "0:0") == 1
    assert "may not contain duplicate entries: 0" in capsys.readouterr().err
    assert topic_tool(cluster, "--create", "--topic", "both", "--partitions", 2,
                      "--replica-assignment", "0,1") == 1
    assert "--replica-assignment can't be used" in capsys.readouterr().err


def test_alter_raises_the_partition_count(cluster, capsys):
    assert topic_tool(cluster, "--create", "--topic", "grow", "--partitions", 2) == 0
    assert topic_tool(cluster, "--alter", "--topic", "grow", "--partitions", 5) == 0
    assert len(cluster.metadata().topics["grow"].partitions) == 5
    capsys.readouterr()
    assert topic_tool(cluster, "--alter", "--topic", "grow", "--partitions", 3) == 1
    err = capsys.readouterr().err
    assert "InvalidPartitionsError" in err and "'grow'" in err and "5" in err and "3" in err
    assert topic_tool(cluster, "--alter", "--topic", "grow") == 1
    assert "Missing required argument --partitions" in capsys.readouterr().err
    assert topic_tool(cluster, "--alter", "--topic", "grow", "--partitions", 6,
                      "--replication-factor", 1) == 1
    assert capsys.readouterr().err == \
        "Option --replication-factor can't be used with option --alter\n"


def test_delete(cluster, capsys):
    assert topic_tool(cluster, "--create", "--topic", "gone", "--partitions", 1) == 0
    assert topic_tool(cluster, "--delete", "--topic", "gone") == 0
    capsys.readouterr()
    assert topic_tool(cluster, "--list") == 0
    assert "gone" not in capsys.readouterr().out.splitlines()
    assert topic_tool(cluster, "--delete", "--topic", "gone") == 1
    assert capsys.readouterr().err == "Topic 'gone' does not exist as expected\n"
    assert topic_tool(cluster, "--delete", "--topic", "gone", "--if-exists") == 0
    assert topic_tool(cluster, "--describe", "--topic", "gone") == 1
    assert "Topic 'gone' does not exist as expected" in capsys.readouterr().err


def test_usage_errors(cluster, capsys):
    assert run_tool(topics, "--list") == 1
    assert "--bootstrap-server must be specified" in capsys.readouterr().err
    assert topic_tool(cluster, "--create", "--partitions", 1) == 1
    assert "Missing required argument --topic (for --create)" in capsys.readouterr().err
    assert topic_tool(cluster, "--list", "--if-not-exists") == 1
    assert "--if-not-exists can't be used with option --list" in capsys.readouterr().err
    assert topic_tool(cluster, "--list", "--topic", "(") == 1
    assert "'(' is an invalid regex" in capsys.readouterr().err


def test_unavailable_partitions_while_a_broker_is_down(cluster, capsys):
    assert topic_tool(cluster, "--create", "--topic", "halves", "--partitions", 2) == 0
    led_by_1 = [p.partition for p in cluster.metadata().topics["halves"].partitions
                if p.leader == 1]
    cluster.kill_broker(1)
    try:
        cluster.wait_for_metadata(lambda image: 1 not in image.live_brokers())
        capsys.readouterr()
        assert topic_tool(cluster, "--describe", "--topic", "halves",
                          "--unavailable-partitions") == 0
        lines = capsys.readouterr().out.splitlines()
        assert [int(re.search(r"Partition: (\d+)", line).group(1)) for line in lines] == \
            led_by_1
        assert all("\tLeader: none\t" in line for line in lines)
    finally:
        cluster.start_broker(1)


def test_a_stopped_cluster_is_one_line_saying_how_to_start_it(tmp_path, capsys):
    cluster_id = dd.ensure_cluster_id(tmp_path)
    assert run_tool(topics, "--bootstrap-server", tmp_path, "--list") == 1
    assert capsys.readouterr().err == (
        f"Error while executing topic command : NoBrokersAvailable: cluster {cluster_id} in "
        f"{tmp_path} is not running (no broker process is alive); start it with: ringlog "
        f"cluster start --data-dir {tmp_path} --detach\n")


def test_describe_report_options_pick_partitions_as_kafka_does(cluster, capsys):
    for name, assignment, configs in (("gone", "1", ()), ("single", "0", ()),
                                      ("urp", "0:1", ()),
                                      ("minisr", "0:1", ("--config", "min.insync.replicas=2"))):
        assert topic_tool(cluster, "--create", "--topic", name, "--replica-assignment",
                          assignment, *configs) == 0
    cluster.kill_broker(1)
    try:
        cluster.wait_for_metadata(lambda image: 1 not in image.live_brokers())
        capsys.readouterr()

        def report(option):
            assert topic_tool(cluster, "--describe", "--topic", "gone|single|urp|minisr",
                              option) == 0
            return capsys.readouterr().out

        def line(name, leader, replicas, isr):
            return (f"\tTopic: {name}\tPartition: 0\tLeader: {leader}\tReplicas: {replicas}"
                    f"\tIsr: {isr}\n")
        gone, single = line("gone", "none", "1", "1"), line("single", 0, "0", "0")
        urp = line("urp", 0, "0,1", "0")
        # below min.insync.replicas the replica that left keeps every acknowledged
        # record: an eligible leader replica (KIP-966), printed as Kafka 3.7 does
        minisr = line("minisr", 0, "0,1", "0")[:-1] + "\tElr: 1\n"
        assert report("--under-replicated-partitions") == minisr + urp
        assert report("--unavailable-partitions") == gone
        assert report("--under-min-isr-partitions") == gone + minisr
        assert report("--at-min-isr-partitions") == gone + single + urp
    finally:
        cluster.start_broker(1)
    assert topic_tool(cluster, "--describe", "--under-replicated-partitions",
                      "--at-min-isr-partitions") == 1
    assert capsys.readouterr().err == ("Option --under-replicated-partitions can't be used "
                                       "with option --at-min-isr-partitions\n")
    assert topic_tool(cluster, "--list", "--under-min-isr-partitions") == 1
    assert "can't be used with option --list" in capsys.readouterr().err
