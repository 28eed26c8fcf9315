"""KafkaAdminClient's consumer-group methods against fake coordinators: FindCoordinator and
its retries, ListGroups at every broker, DescribeGroups with the consumer protocol decoded,
OffsetFetch, DeleteGroups, OffsetCommit as an admin (generation -1) and OffsetDelete."""
from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from cluster.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    KafkaTimeoutError,
    NoError,
    NonEmptyGroupError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from cluster.structs import (
    ConsumerAssignment,
    ConsumerSubscription,
    OffsetAndMetadata,
    TopicPartition,
)
from tests.support.fake_broker import FakeMember

ALICE = FakeMember("alice-1", client_id="alice", host="/10.0.0.1", topics=("orders",),
                   assignment={"orders": [0, 1]}, instance_id="a")


def requests_of(cluster, api):
    return [broker for broker, name, _ in cluster.requests if name == api]


def test_find_coordinator_retries_until_the_group_has_one(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=3, group_model="admin")
    admin = admin_of(cluster)
    cluster.coordinators["g"] = 2
    for code in (ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
                 ErrorCode.not_coordinator):
        cluster.fail_next("g", None, code, api="FIND_COORDINATOR")
    assert admin.find_coordinator("g") == {"node_id": 2, "host": "localhost", "port": 9094}
    assert len(requests_of(cluster, "FIND_COORDINATOR")) == 4


def test_find_coordinator_gives_up_after_the_request_timeout(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=1, group_model="admin")
    admin = admin_of(cluster, request_timeout_ms=200)
    cluster.fail_next("g", None, ErrorCode.coordinator_not_available, times=10_000,
                      api="FIND_COORDINATOR")
    with pytest.raises(KafkaTimeoutError, match=r"gave up after the request timeout: "
                                                 r"\[Error 15\] group 'g': "
                                                 r"The coordinator is not available"):
        admin.find_coordinator("g")


def test_list_consumer_groups_asks_every_broker(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2, group_model="admin")
    admin = admin_of(cluster)
    cluster.add_group("on-0", "Empty")
    cluster.add_group("on-1", "Stable", [ALICE])
    cluster.coordinators["on-1"] = 1
    assert admin.list_consumer_groups() == [("on-0", "consumer"), ("on-1", "consumer")]
    assert sorted(requests_of(cluster, "LIST_GROUPS")) == [0, 1]
    assert admin.list_consumer_groups(broker_ids=[1]) == [("on-1", "consumer")]


def test_describe_consumer_groups_decodes_members(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2, group_model="admin")
    admin = admin_of(cluster)
    cluster.create_topic("orders", 2)
    cluster.add_group("g", "Stable", [ALICE], protocol="range")
    cluster.coordinators["g"] = 1
    (group, ghost) = admin.describe_consumer_groups(["g", "ghost"])
    assert (group.error_code, group.group, group.state, group.protocol_type,
            group.protocol) == (0, "g", "Stable", "consumer", "range")
    (member,) = group.members
    assert (member.member_id, member.client_id, member.client_host,
            member.group_instance_id) == ("alice-1", "alice", "/10.0.0.1", "a")
    assert member.member_metadata == ConsumerSubscription(("orders",), (), -1, None)
    assert member.member_assignment == ConsumerAssignment([("orders", [0, 1])], None)
    assert (ghost.group, ghost.state, ghost.members) == ("ghost", "Dead", [])
    # each group went to its own coordinator
    assert requests_of(cluster, "DESCRIBE_GROUPS") == [1, 0]


def test_describe_follows_a_moved_coordinator(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2, group_model="admin")
    admin = admin_of(cluster)
    cluster.add_group("g", "Empty")
    cluster.fail_next("g", None, ErrorCode.not_coordinator, api="DESCRIBE_GROUPS")
    (group,) = admin.describe_consumer_groups(["g"])
    assert group.state == "Empty"
    assert len(requests_of(cluster, "FIND_COORDINATOR")) == 2
    assert requests_of(cluster, "DESCRIBE_GROUPS") == [0, 0]


def test_group_coordinator_id_skips_find_coordinator(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2, group_model="admin")
    admin = admin_of(cluster)
    cluster.add_group("g", "Empty")
    cluster.coordinators["g"] = 1
    (group,) = admin.describe_consumer_groups(["g"], group_coordinator_id=1)
    assert group.state == "Empty"
    assert requests_of(cluster, "FIND_COORDINATOR") == []


def test_list_consumer_group_offsets(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2, group_model="admin")
    admin = admin_of(cluster)
    cluster.create_topic("orders", 3)
    cluster.commit("g", "orders", 0, 5, metadata="m", leader_epoch=2)
    cluster.commit("g", "orders", 2, 7)
    assert admin.list_consumer_group_offsets("g") == {
        TopicPartition("orders", 0): OffsetAndMetadata(5, "m", 2),
        TopicPartition("orders", 2): OffsetAndMetadata(7, "", -1)}
    asked = [TopicPartition("orders", 1), TopicPartition("orders", 2)]
    assert admin.list_consumer_group_offsets("g", partitions=asked) == {
        TopicPartition("orders", 1): OffsetAndMetadata(-1, "", -1),
        TopicPartition("orders", 2): OffsetAndMetadata(7, "", -1)}
    assert admin.list_consumer_group_offsets("nobody") == {}


def test_delete_consumer_groups(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2, group_model="admin")
    admin = admin_of(cluster)
    cluster.add_group("idle", "Empty")
    cluster.add_group("busy", "Stable", [ALICE])
    assert admin.delete_consumer_groups(["idle", "busy", "ghost"]) == [
        ("idle", NoError), ("busy", NonEmptyGroupError), ("ghost", GroupIdNotFoundError)]
    assert admin.list_consumer_groups() == [("busy", "consumer")]


def test_alter_consumer_group_offsets_only_without_members(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2, group_model="admin")
    admin = admin_of(cluster)
    cluster.create_topic("orders", 2)
    cluster.add_group("busy", "Stable", [ALICE])
    p0, p1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
    assert admin.alter_consumer_group_offsets("new", {p0: OffsetAndMetadata(3), p1: 4}) == {
        p0: NoError, p1: NoError}
    assert cluster.committed("new") == {("orders", 0): 3, ("orders", 1): 4}
    (group,) = admin.describe_consumer_groups(["new"])
    assert group.state == "Empty"
    assert admin.alter_consumer_group_offsets("busy", {p0: 1}) == {p0: UnknownMemberIdError}
    assert admin.alter_consumer_group_offsets(
        "new", {TopicPartition("ghost", 0): 1}) == {
        TopicPartition("ghost", 0): UnknownTopicOrPartitionError}
    _, _, commit = next(r for r in cluster.requests if r[1] == "OFFSET_COMMIT")
    assert (commit.generation_id_or_member_epoch, commit.member_id) == (-1, "")


def test_delete_consumer_group_offsets(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2, group_model="admin")
    admin = admin_of(cluster)
    cluster.create_topic("orders", 2)
    cluster.create_topic("audit", 1)
    cluster.add_group("g", "Stable", [ALICE])
    cluster.commit("g", "orders", 0, 1)
    cluster.commit("g", "audit", 0, 2)
    assert admin.delete_consumer_group_offsets(
        "g", [TopicPartition("orders", 0), TopicPartition("audit", 0)]) == {
        TopicPartition("orders", 0): GroupSubscribedToTopicError,
        TopicPartition("audit", 0): NoError}
    assert cluster.committed("g") == {("orders", 0): 1}
    with pytest.raises(GroupIdNotFoundError, match="ghost"):
        admin.delete_consumer_group_offsets("ghost", [TopicPartition("orders", 0)])


def test_offset_fetch_waits_out_a_loading_coordinator(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2, group_model="admin")
    admin = admin_of(cluster)
    cluster.create_topic("orders", 1)
    cluster.commit("g", "orders", 0, 9)
    cluster.fail_next("g", None, ErrorCode.coordinator_load_in_progress, times=2,
                      api="OFFSET_FETCH")
    assert admin.list_consumer_group_offsets("g") == {
        TopicPartition("orders", 0): OffsetAndMetadata(9, "", -1)}
    assert requests_of(cluster, "OFFSET_FETCH") == [0, 0, 0]


def test_a_dead_coordinator_is_replaced(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=2, group_model="admin")
    admin = admin_of(cluster)
    cluster.add_group("g", "Empty")
    cluster.coordinators["g"] = 1
    assert admin.describe_consumer_groups(["g"])[0].state == "Empty"
    cluster.stop_broker(1)
    cluster.coordinators["g"] = 0  # __consumer_offsets' partition moved to broker 0
    assert admin.describe_consumer_groups(["g"])[0].state == "Empty"
    assert requests_of(cluster, "DESCRIBE_GROUPS")[-1] == 0


def test_a_coordinator_error_that_lasts_gives_up(fake_cluster, admin_of):
    cluster = fake_cluster(brokers=1, group_model="admin")
    admin = admin_of(cluster, request_timeout_ms=300)
    cluster.fail_next("g", None, ErrorCode.not_coordinator, times=10_000, api="DELETE_GROUPS")
    with pytest.raises(KafkaTimeoutError, match=r"timeout: \[Error 16\] group 'g' at broker 0: "
                                                 r"This is not the correct coordinator"):
        admin.delete_consumer_groups(["g"])
