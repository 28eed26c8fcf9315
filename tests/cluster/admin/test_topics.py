"""KafkaAdminClient against fake brokers: topic create / list / describe / delete, partitions,
errors naming the topic, and the controller found again after NOT_CONTROLLER."""
from __future__ import annotations

import pytest

from cluster.admin.kafka_admin_client import NewPartitions, NewTopic
from cluster.errors import (
    IllegalArgumentError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)


def test_create_describe_list_delete(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2)
    admin = admin_of(cluster)
    result = admin.create_topics([NewTopic("logs", num_partitions=3, replication_factor=1)])
    assert result == {"topics": [{"name": "logs", "error_code": 0, "error_message": None}]}
    assert admin.list_topics() == ["logs"]
    [described] = admin.describe_topics(["logs"])
    assert described["name"] == "logs" and not described["is_internal"]
    assert [(p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"])
            for p in described["partitions"]] == [(0, 0, [0], [0]), (1, 1, [1], [1]),
                                                  (2, 0, [0], [0])]
    assert admin.delete_topics(["logs"]) == {"topics": [{"name": "logs", "error_code": 0}]}
    assert admin.list_topics() == []


def test_topic_changes_go_to_the_controller(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=3)
    with cluster.lock:
        cluster._publish(controller_id=2)
    admin = admin_of(cluster)
    admin.create_topics(["a"])
    admin.create_partitions({"a": NewPartitions(2)})
    admin.delete_topics(["a"])
    changes = [(broker, name) for broker, name, _ in cluster.requests
               if name in ("CREATE_TOPICS", "CREATE_PARTITIONS", "DELETE_TOPICS")]
    assert changes == [(2, "CREATE_TOPICS"), (2, "CREATE_PARTITIONS"), (2, "DELETE_TOPICS")]


def test_not_controller_is_retried_at_the_new_controller(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2)
    admin = admin_of(cluster)
    cluster.report_controllers = [1]  # a stale answer: broker 1 is not the controller
    admin.create_topics([NewTopic("x", 1, 1)])
    creates = [broker for broker, name, _ in cluster.requests if name == "CREATE_TOPICS"]
    assert creates == [1, 0]
    assert admin.list_topics() == ["x"]


def test_no_controller_gives_up_after_the_timeout(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=1)
    admin = admin_of(cluster, request_timeout_ms=200)
    cluster.report_controllers = [-1] * 1000
    with pytest.raises(KafkaTimeoutError, match="no active controller"):
        admin.create_topics(["x"])


def test_errors_name_the_topic(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2)
    admin = admin_of(cluster)
    admin.create_topics([NewTopic("logs", 2, 1)])
    with pytest.raises(TopicAlreadyExistsError) as exists:
        admin.create_topics([NewTopic("logs", 2, 1)])
    assert str(exists.value).endswith(" Topic 'logs' already exists.")
    assert "topic 'logs':" not in str(exists.value)  # the topic named once
    with pytest.raises(InvalidReplicationFactorError, match="topic 'wide': Replication factor: "
                                                            "3 larger than available brokers"):
        admin.create_topics([NewTopic("wide", 1, 3)])
    with pytest.raises(InvalidTopicError, match="topic 'no spaces'"):
        admin.create_topics([NewTopic("no spaces", 1, 1)])
    with pytest.raises(InvalidPartitionsError, match="topic 'logs': Topic currently has 2"):
        admin.create_partitions({"logs": NewPartitions(1)})
    with pytest.raises(UnknownTopicOrPartitionError, match="topic 'ghost'"):
        admin.delete_topics(["ghost"])
    with pytest.raises(UnknownTopicOrPartitionError, match="topic 'ghost'"):
        admin.describe_topics(["ghost"])


def test_several_failures_are_named_together_and_others_still_happen(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=1)
    admin = admin_of(cluster)
    admin.create_topics(["a"])
    with pytest.raises(TopicAlreadyExistsError, match=r"Topic 'a'.*also failed: 'b!' "
                                                      r"\(INVALID_TOPIC_EXCEPTION\)"):
        admin.create_topics(["a", "b!", "c"])
    assert sorted(admin.list_topics()) == ["a", "c"]


def test_raise_errors_false_returns_the_codes(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=1)
    admin = admin_of(cluster)
    admin.create_topics(["a"])
    result = admin.create_topics(["a"], raise_errors=False)
    assert result["topics"][0]["error_code"] == TopicAlreadyExistsError.errno
    result = admin.delete_topics(["ghost"], raise_errors=False)
    assert result["topics"] == [{"name": "ghost", "error_code": 3}]


def test_validate_only_creates_nothing(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=1)
    admin = admin_of(cluster)
    admin.create_topics([NewTopic("dry", 4, 1)], validate_only=True)
    admin.create_partitions({"dry": 8}, validate_only=True, raise_errors=False)
    assert admin.list_topics() == []


def test_create_topics_takes_kafka_pythons_other_shapes(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2, num_partitions=2)
    admin = admin_of(cluster)
    admin.create_topics({"shaped": {"num_partitions": 3, "replication_factor": 1,
                                    "configs": {"retention.ms": 1000}}})
    admin.create_topics(["named"])
    sizes = {t["name"]: len(t["partitions"]) for t in admin.describe_topics()}
    assert sizes == {"shaped": 3, "named": 2}
    [request] = [r for _, name, r in cluster.requests if name == "CREATE_TOPICS"][:1]
    assert [(c.name, c.value) for c in request.topics[0].configs] == [("retention.ms", "1000")]


def test_create_partitions_grows_the_topic(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2)
    admin = admin_of(cluster)
    admin.create_topics([NewTopic("grow", 1, 1)])
    assert admin.create_partitions({"grow": NewPartitions(total_count=4)}) == {
        "results": [{"name": "grow", "error_code": 0, "error_message": None}]}
    assert len(admin.describe_topics(["grow"])[0]["partitions"]) == 4


def test_describe_cluster(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=3)
    admin = admin_of(cluster)
    described = admin.describe_cluster()
    assert described["cluster_id"] == cluster.cluster_id
    assert described["controller_id"] == 0
    assert [b["node_id"] for b in described["brokers"]] == [0, 1, 2]


def test_negative_timeout_is_refused(fake_cluster, admin_of):
    admin = admin_of(fake_cluster(brokers=1))
    with pytest.raises(IllegalArgumentError, match="timeout_ms must be >= 0, found -1"):
        admin.create_topics(["a"], timeout_ms=-1)


def test_create_topics_waits_for_metadata_as_kafka_python_3(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2)
    admin = admin_of(cluster)
    result = admin.create_topics([NewTopic("ready", 3, 1)], wait_for_metadata=True)
    assert result["topics"] == [{"name": "ready", "error_code": 0, "error_message": None}]
    partitions = admin.describe_topics(["ready"])[0]["partitions"]
    assert [p["leader_id"] >= 0 for p in partitions] == [True] * 3
    with pytest.raises(ValueError, match="mutually exclusive"):
        admin.create_topics([NewTopic("never", 1, 1)], validate_only=True,
                            wait_for_metadata=True)
    with pytest.raises(KafkaTimeoutError, match=r"Topics not ready after 200ms: \{'ghost': "):
        admin.wait_for_topics(["ghost"], timeout_ms=200)
