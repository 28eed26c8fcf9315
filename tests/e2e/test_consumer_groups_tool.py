"""KafkaAdminClient's group methods and ``ringlog consumer-groups`` against real brokers
(their unit tests use fake brokers): offsets committed for an Empty group through the
admin client are what the coordinator returns, what ``--describe`` shows beside the log end
offsets, what ``--reset-offsets --execute`` moves, and ``--delete`` removes the group.

The ``e2e`` fixture stops the cluster and fails the test if any process it started still
runs or any shared-memory object of its cluster is left."""
from __future__ import annotations

import pytest

from cluster import KafkaAdminClient, KafkaProducer, NewTopic, OffsetAndMetadata, TopicPartition
from cluster.tools.cli import main as ringlog
from tests.support.bounds import BOUND

pytestmark = pytest.mark.multiprocess

GROUP = "billing"
TOPIC = "invoices"


def groups_tool(cluster, capsys, *argv):
    code = ringlog(["consumer-groups", "--bootstrap-server", cluster.bootstrap_servers,
                    *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_offsets_committed_by_the_admin_client_are_described_reset_and_deleted(e2e, capsys):
    cluster = e2e.cluster(brokers=3, offsets_topic_num_partitions=3)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(TOPIC, 2, 3)])
        with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as p:
            for n in range(10):
                p.send(TOPIC, b"x", partition=n % 2)
            p.flush(BOUND)
        errors = admin.alter_consumer_group_offsets(GROUP, {
            TopicPartition(TOPIC, 0): OffsetAndMetadata(2, ""),
            TopicPartition(TOPIC, 1): OffsetAndMetadata(4, "")})
        assert {tp: e.errno for tp, e in errors.items()} == {
            TopicPartition(TOPIC, 0): 0, TopicPartition(TOPIC, 1): 0}
        assert {tp: om.offset for tp, om in
                admin.list_consumer_group_offsets(GROUP).items()} == {
            TopicPartition(TOPIC, 0): 2, TopicPartition(TOPIC, 1): 4}
        assert GROUP in [group for group, _ in admin.list_consumer_groups()]

    code, out, _ = groups_tool(cluster, capsys, "--list")
    assert code == 0 and GROUP in out.split()
    code, out, _ = groups_tool(cluster, capsys, "--describe", "--group", GROUP)
    assert code == 0
    rows = [line.split() for line in out.splitlines() if line.startswith(GROUP)]
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
    assert sorted(row[:6] for row in rows) == [
        [GROUP, TOPIC, "0", "2", "5", "3"], [GROUP, TOPIC, "1", "4", "5", "1"]]
    assert all(row[6:] == ["-", "-", "-"] for row in rows)

    code, out, _ = groups_tool(cluster, capsys, "--reset-offsets", "--group", GROUP,
                               "--topic", TOPIC, "--to-earliest", "--execute")
    assert code == 0
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        assert {tp: om.offset for tp, om in
                admin.list_consumer_group_offsets(GROUP).items()} == {
            TopicPartition(TOPIC, 0): 0, TopicPartition(TOPIC, 1): 0}

    code, out, _ = groups_tool(cluster, capsys, "--delete", "--group", GROUP)
    assert code == 0 and GROUP in out
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        assert admin.list_consumer_group_offsets(GROUP) == {}
