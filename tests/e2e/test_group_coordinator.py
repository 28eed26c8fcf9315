"""The group coordinator on a real 3-broker cluster, driven by a raw protocol client (G1,
G3-G5, G7): FindCoordinator creates ``__consumer_offsets`` and names the leader of the
group's partition; a member joins (MEMBER_ID_REQUIRED, then joined), syncs, heartbeats,
commits and fetches an offset. Then the coordinator broker is SIGKILLed: FindCoordinator
names the new leader of that partition, which loaded the group from its replica of the
log: the committed offset (acknowledged only once replicated) and the group's member and
generation are there.

The ``e2e`` fixture stops the cluster and fails the test if any process it started still
runs or any shared-memory object of its cluster is left."""
from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode

from cluster import KafkaAdminClient, NewTopic
from cluster.metadata.model import GROUP_METADATA_TOPIC
from replica_proc.coordinator_common.partitioning import partition_for
from tests.support.bounds import BOUND
from tests.support.broker import Client
from tests.support.groups import (
    commit_errors,
    committed,
    describe_groups_request,
    find_coordinator_request,
    heartbeat_request,
    join_group_request,
    offset_commit_request,
    offset_fetch_request,
    sync_group_request,
)

pytestmark = pytest.mark.multiprocess

GROUP = "failover-group"
TOPIC = "consumed"
OFFSETS_PARTITIONS = 5
SESSION_MS = 60_000


def find_coordinator(cluster, broker_id, excluded=()):
    """Ask broker ``broker_id`` for the group's coordinator until it names one not in
    ``excluded`` (within BOUND); its node id."""
    client = Client(cluster.namespace, broker_id)
    try:
        deadline = time.monotonic() + BOUND
        while True:
            answer = client.call(find_coordinator_request(GROUP))
            if answer.error_code == ErrorCode.none and answer.node_id not in excluded:
                return answer.node_id
            assert answer.error_code in (ErrorCode.none, ErrorCode.coordinator_not_available)
            assert time.monotonic() < deadline, f"no coordinator after {BOUND} s: {answer}"
            time.sleep(0.05)
    finally:
        client.close()


def test_a_group_and_its_offsets_survive_the_coordinators_death(e2e):
    cluster = e2e.cluster(brokers=3, offsets_topic_num_partitions=OFFSETS_PARTITIONS,
                          group_initial_rebalance_delay_ms=0)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(TOPIC, 1, 3)])
    node = find_coordinator(cluster, 0)
    index = partition_for(GROUP, OFFSETS_PARTITIONS)
    image = cluster.wait_for_metadata(lambda i: GROUP_METADATA_TOPIC in i.topics)
    offsets = image.topics[GROUP_METADATA_TOPIC]
    assert offsets.internal and len(offsets.partitions) == OFFSETS_PARTITIONS
    assert offsets.configs == {"cleanup.policy": "compact", "segment.bytes": "104857600"}
    assert node == offsets.partitions[index].leader
    assert len(offsets.partitions[index].replicas) == 3

    coordinator = Client(cluster.namespace, node)
    try:
        required = coordinator.call(join_group_request(GROUP, session_ms=SESSION_MS))
        assert required.error_code == ErrorCode.member_id_required
        member = required.member_id
        joined = coordinator.call(join_group_request(GROUP, member, session_ms=SESSION_MS))
        assert (joined.error_code, joined.generation_id, joined.leader) == (
            ErrorCode.none, 1, member)
        synced = coordinator.call(sync_group_request(GROUP, 1, member, [(member, b"p0")]))
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"p0")
        assert coordinator.call(heartbeat_request(GROUP, 1, member)).error_code == \
            ErrorCode.none
        answer = coordinator.call(offset_commit_request(GROUP, {(TOPIC, 0): 42}, 1, member))
        assert commit_errors(answer) == {(TOPIC, 0): ErrorCode.none}
        fetched = coordinator.call(offset_fetch_request(GROUP, [(TOPIC, 0)]))
        assert committed(fetched) == {(TOPIC, 0): (42, ErrorCode.none)}
    finally:
        coordinator.close()

    cluster.kill_broker(node)
    cluster.wait_for_metadata(
        lambda i: i.topics[GROUP_METADATA_TOPIC].partitions[index].leader not in (node, -1))
    survivor = min(set(cluster.broker_ids) - {node})
    new_node = find_coordinator(cluster, survivor, excluded=(node,))
    coordinator = Client(cluster.namespace, new_node)
    try:
        fetched = coordinator.call(offset_fetch_request(GROUP, [(TOPIC, 0)]))
        assert committed(fetched) == {(TOPIC, 0): (42, ErrorCode.none)}
        [group] = coordinator.call(describe_groups_request([GROUP])).groups
        assert (group.group_state, [(m.member_id, m.member_assignment)
                                    for m in group.members]) == ("Stable", [(member, b"p0")])
        assert coordinator.call(heartbeat_request(GROUP, 1, member)).error_code == \
            ErrorCode.none
    finally:
        coordinator.close()


def test_a_one_broker_cluster_gets_its_coordinator(e2e):
    """offsets.topic.replication.factor 3 is capped by the live brokers: one replica."""
    cluster = e2e.cluster(brokers=1, offsets_topic_num_partitions=OFFSETS_PARTITIONS)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
    assert find_coordinator(cluster, 0) == 0
    image = cluster.wait_for_metadata(lambda i: GROUP_METADATA_TOPIC in i.topics)
    assert {len(p.replicas) for p in image.topics[GROUP_METADATA_TOPIC].partitions} == {1}
    client = Client(cluster.namespace, 0)
    try:
        answer = client.call(offset_commit_request(GROUP, {(TOPIC, 0): 7}))
        assert commit_errors(answer) == {(TOPIC, 0): ErrorCode.none}
        fetched = client.call(offset_fetch_request(GROUP, None))
        assert committed(fetched) == {(TOPIC, 0): (7, ErrorCode.none)}
    finally:
        client.close()
