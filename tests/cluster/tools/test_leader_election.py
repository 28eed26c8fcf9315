"""``ringlog leader-election`` and ``KafkaAdminClient.perform_leader_election`` against a real
three-broker cluster: Kafka's lines and exit codes for elections that succeed, are not
needed and fail, and Kafka's option and JSON-file errors.

Followers do not join the ISR yet, so after a broker restarts its replicas are out of sync
and a PREFERRED election back to it is refused (PREFERRED_LEADER_NOT_AVAILABLE); the
successful preferred election is covered by the controller tests
(tests/replica_proc/controller/test_elections.py). UNCLEAN elections succeed end to end.
"""
from __future__ import annotations

import json

import pytest

from cluster.admin.kafka_admin_client import KafkaAdminClient, NewTopic
from cluster.errors import ElectionNotNeededError
from cluster.protocol.frames import ElectionType
from cluster.tools import leader_election
from tests.support.tools import run_tool, tool_cluster

pytestmark = pytest.mark.multiprocess

cluster = tool_cluster(brokers=3)


def elect(cluster, *argv):
    return run_tool(leader_election, "--bootstrap-server", cluster.bootstrap_servers, *argv)


def leader(image, topic, partition=0):
    p = image.partition(topic, partition)
    return p.leader, p.leader_epoch


def test_elections_after_a_broker_restart(cluster, capsys, tmp_path):
    image = cluster.metadata()
    victim, follower = [b for b in cluster.broker_ids if b != image.controller_id][:2]
    others = [b for b in cluster.broker_ids if b != victim]
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([
            NewTopic("back", replica_assignments={0: [victim, *others]},
                     topic_configs={"unclean.leader.election.enable": "true"}),
            NewTopic("offline", replica_assignments={0: [victim, follower]}),
            # led by the controller's broker, never stopped here: no election needed
            NewTopic("steady", replica_assignments={0: [image.controller_id, victim]})])
    # offline-0 loses its follower first (its ISR: the victim alone), then its leader:
    # no live ISR member is left, and a clean election leaves it offline.
    cluster.kill_broker(follower)
    try:
        cluster.wait_for_metadata(lambda image: image.partition("offline", 0).isr == (victim,))
        cluster.kill_broker(victim)
        try:
            image = cluster.wait_for_metadata(
                lambda image: victim not in image.live_brokers()
                and image.partition("back", 0).leader not in (victim, -1))
            assert leader(image, "offline") == (-1, 1)
        finally:
            cluster.start_broker(follower)
        cluster.wait_for_metadata(lambda image: follower in image.live_brokers())
        assert elect(cluster, "--election-type", "unclean", "--topic", "offline",
                     "--partition", 0) == 0
        assert capsys.readouterr() == (
            "Successfully completed leader election (UNCLEAN) for partitions offline-0\n", "")
        assert leader(cluster.metadata(), "offline") == (follower, 2)
    finally:
        cluster.start_broker(victim)
    # The victim catches up and rejoins the ISRs: preferred elections may move back to it.
    cluster.wait_for_metadata(lambda image: all(
        victim in image.partition(topic, 0).isr for topic in ("back", "offline", "steady")))

    elections = tmp_path / "elections.json"
    elections.write_text(json.dumps({"partitions": [{"topic": "back", "partition": 0},
                                                    {"topic": "steady", "partition": 0}]}))
    assert elect(cluster, "--election-type", "PREFERRED", "--path-to-json-file",
                 elections) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "Successfully completed leader election (PREFERRED) for partitions back-0",
        "Valid replica already elected for partitions steady-0"]
    assert err == ""
    assert leader(cluster.metadata(), "back")[0] == victim

    assert elect(cluster, "--election-type", "PREFERRED", "--all-topic-partitions") == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "Successfully completed leader election (PREFERRED) for partitions offline-0"]
    assert leader(cluster.metadata(), "offline") == (victim, 3)


def test_the_admin_client_as_kafka_python(cluster):
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("own", num_partitions=2, replication_factor=1)])
        with pytest.raises(ElectionNotNeededError, match="partition own-0"):
            admin.perform_leader_election(ElectionType.PREFERRED, {"own": [0]})
        result = admin.perform_leader_election(0, ["own"], raise_errors=False)
        assert result == {"error_code": 0, "replica_election_results": [
            {"topic": "own", "partition_result": [
                {"partition_id": p, "error_code": ElectionNotNeededError.errno,
                 "error_message": f"own-{p}: the preferred replica "
                                  f"{cluster.metadata().partition('own', p).leader} leads "
                                  f"already"} for p in (0, 1)]}]}
        result = admin.perform_leader_election(ElectionType.UNCLEAN, {"own": [1], "nope": [0]},
                                               raise_errors=False)
        assert [(t["topic"], [p["error_code"] for p in t["partition_result"]])
                for t in result["replica_election_results"]] == [("own", [84]), ("nope", [3])]


@pytest.mark.parametrize("argv, message", [
    ((), "Missing required option(s): election-type"),
    (("--election-type", "random", "--all-topic-partitions"),
     "--election-type random: Expected one of PREFERRED or UNCLEAN"),
    (("--election-type", "preferred"), "One and only one of the following options is "
                                       "required: topic, all-topic-partitions, "
                                       "path-to-json-file"),
    (("--election-type", "preferred", "--topic", "t", "--all-topic-partitions"),
     "One and only one of the following options is required"),
    (("--election-type", "preferred", "--topic", "t"), "Missing required option(s): partition"),
    (("--election-type", "preferred", "--all-topic-partitions", "--partition", 1),
     "Option partition is only allowed if topic is used"),
])
def test_option_errors(cluster, capsys, argv, message):
    assert elect(cluster, *argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(message)


@pytest.mark.parametrize("content, message", [
    ({"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]},
     "Replica election data contains duplicate partitions: t-0"),
    ({"elections": []}, 'Replica election data is missing "partitions" field'),
    ({"partitions": [{"topic": "t"}]}, "each partition must be"),
    ("{not json", "is not JSON"),
])
def test_json_file_errors(cluster, capsys, tmp_path, content, message):
    path = tmp_path / "e.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    assert elect(cluster, "--election-type", "preferred", "--path-to-json-file", path) == 1
    assert message in capsys.readouterr().err
