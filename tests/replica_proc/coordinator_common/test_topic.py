"""The coordinators' internal topics: created on first use with Kafka's settings, the
replication factor and min ISR capped at the live brokers, and FindCoordinator's answer
(the leader of the key's partition) against a fake metadata image."""
from __future__ import annotations

import types

from cluster.config.broker import BrokerConfig
from cluster.errors import CoordinatorNotAvailableError
from cluster.metadata.model import (
    GROUP_METADATA_TOPIC,
    INTERNAL_TOPICS,
    TRANSACTION_STATE_TOPIC,
    BrokerInfo,
    MetadataImage,
    PartitionState,
    TopicInfo,
)
from replica_proc.coordinator_common.partitioning import partition_for
from replica_proc.coordinator_common.topic import CoordinatorTopic

UNAVAILABLE = CoordinatorNotAvailableError.errno


def cluster(alive=(0, 1), topics=None):
    brokers = {i: BrokerInfo(i, 100 + i, i in alive) for i in range(3)}
    return types.SimpleNamespace(image=MetadataImage(1, "c", 0, brokers, topics or {}))


def test_the_transaction_log_is_created_on_first_use_with_kafkas_settings():
    created = []
    metadata = cluster(alive=(0, 1))
    topic = CoordinatorTopic.transaction_log(BrokerConfig({}), metadata,
                                             lambda *args: created.append(args))
    assert topic.info() is None
    assert created == [(TRANSACTION_STATE_TOPIC, 50, 2, {
        "cleanup.policy": "compact", "segment.bytes": "104857600",
        "unclean.leader.election.enable": "false", "min.insync.replicas": "2"})]
    assert topic.coordinator_node("t")[0] == UNAVAILABLE
    lone = CoordinatorTopic.transaction_log(BrokerConfig({}), cluster(alive=(1,)),
                                            lambda *args: created.append(args))
    lone.info()
    assert created[-1][2:] == (1, {
        "cleanup.policy": "compact", "segment.bytes": "104857600",
        "unclean.leader.election.enable": "false", "min.insync.replicas": "1"})
    assert TRANSACTION_STATE_TOPIC in INTERNAL_TOPICS


def test_the_offsets_topic_keeps_its_settings():
    created = []
    config = BrokerConfig({"offsets.topic.num.partitions": 7})
    CoordinatorTopic.offsets(config, cluster(alive=(0, 1, 2)),
                             lambda *args: created.append(args)).info()
    assert created == [(GROUP_METADATA_TOPIC, 7, 3, {"cleanup.policy": "compact",
                                                     "segment.bytes": "104857600"})]


def test_nothing_is_created_without_live_brokers():
    created = []
    topic = CoordinatorTopic.transaction_log(BrokerConfig({}), cluster(alive=()),
                                             lambda *args: created.append(args))
    assert topic.info() is None and created == []


def test_the_coordinator_is_the_leader_of_the_keys_partition():
    partitions = tuple(PartitionState(TRANSACTION_STATE_TOPIC, p, p % 3, 0, (0, 1, 2),
                                      (0, 1, 2)) for p in range(5))
    info = TopicInfo(TRANSACTION_STATE_TOPIC, "id", partitions, internal=True)
    metadata = cluster(alive=(0, 1), topics={TRANSACTION_STATE_TOPIC: info})
    topic = CoordinatorTopic.transaction_log(BrokerConfig({}), metadata, None)
    assert topic.info() is info
    by_leader = {}
    for key in ("a", "b", "c", "d", "e", "f", "g"):
        by_leader.setdefault(partition_for(key, 5) % 3, []).append(key)
    for key in by_leader.get(0, []) + by_leader.get(1, []):
        assert topic.coordinator_node(key) == (0, None, partition_for(key, 5) % 3)
    for key in by_leader.get(2, []):  # broker 2 is not alive
        code, message, node = topic.coordinator_node(key)
        assert (code, node) == (UNAVAILABLE, -1) and "no live leader" in message
    assert by_leader.get(2)
