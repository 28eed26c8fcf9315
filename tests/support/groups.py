"""Request bodies of the group APIs (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups,
OffsetDelete), as a consumer or an admin client sends them; for the broker's group tests
(in-process and on real clusters)."""
from __future__ import annotations

import datetime

from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey

CONSUMER = "consumer"
RANGE = (("range", b"subscription"),)


def _m(api, version):
    return protocol.request_module(api, version)


def find_coordinator_request(key, key_type=0, version=2):
    m = _m(ApiKey.FIND_COORDINATOR, version)
    if version == 0:
        return m.FindCoordinatorRequest(key=key)
    return m.FindCoordinatorRequest(key=key, key_type=key_type)


def join_group_request(group, member_id="", instance=None, protocols=RANGE,
                       session_ms=10_000, rebalance_ms=30_000, version=5):
    m = _m(ApiKey.JOIN_GROUP, version)
    fields = dict(group_id=group, session_timeout=datetime.timedelta(milliseconds=session_ms),
                  rebalance_timeout=datetime.timedelta(milliseconds=rebalance_ms),
                  member_id=member_id, protocol_type=CONSUMER,
                  protocols=tuple(m.JoinGroupRequestProtocol(name=n, metadata=md)
                                  for n, md in protocols))
    if version >= 5:
        fields["group_instance_id"] = instance
    return m.JoinGroupRequest(**fields)


def sync_group_request(group, generation, member_id, assignments=(), instance=None,
                       version=3):
    m = _m(ApiKey.SYNC_GROUP, version)
    fields = dict(group_id=group, generation_id=generation, member_id=member_id,
                  assignments=tuple(m.SyncGroupRequestAssignment(member_id=k, assignment=v)
                                    for k, v in assignments))
    if version >= 3:
        fields["group_instance_id"] = instance
    return m.SyncGroupRequest(**fields)


def heartbeat_request(group, generation, member_id, version=3):
    m = _m(ApiKey.HEARTBEAT, version)
    fields = dict(group_id=group, generation_id=generation, member_id=member_id)
    if version >= 3:
        fields["group_instance_id"] = None
    return m.HeartbeatRequest(**fields)


def leave_group_request(group, member_id, version=3):
    m = _m(ApiKey.LEAVE_GROUP, version)
    if version >= 3:
        return m.LeaveGroupRequest(group_id=group, members=(
            m.MemberIdentity(member_id=member_id, group_instance_id=None),))
    return m.LeaveGroupRequest(group_id=group, member_id=member_id)


def offset_commit_request(group, offsets, generation=-1, member_id="", version=7):
    """``offsets``: {(topic, partition): offset}."""
    m = _m(ApiKey.OFFSET_COMMIT, version)
    topics = {}
    for (topic, partition), offset in offsets.items():
        fields = dict(partition_index=partition, committed_offset=offset,
                      committed_metadata="meta")
        if version >= 6:
            fields["committed_leader_epoch"] = 0
        topics.setdefault(topic, []).append(m.OffsetCommitRequestPartition(**fields))
    fields = dict(group_id=group, generation_id_or_member_epoch=generation,
                  member_id=member_id,
                  topics=tuple(m.OffsetCommitRequestTopic(name=t, partitions=tuple(ps))
                               for t, ps in topics.items()))
    if version >= 7:
        fields["group_instance_id"] = None
    if version <= 4:
        fields["retention_time"] = datetime.timedelta(milliseconds=-1)
    return m.OffsetCommitRequest(**fields)


def txn_offset_commit_request(group, offsets, producer=(7, 0), generation=-1, member_id="",
                              instance=None, version=3):
    """``offsets``: {(topic, partition): offset}, in the transaction of ``producer`` (id,
    epoch); v3 carries the consumer's generation, member id and instance id."""
    m = _m(ApiKey.TXN_OFFSET_COMMIT, version)
    topics = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(m.TxnOffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_metadata=""))
    fields = dict(transactional_id="tx", group_id=group, producer_id=producer[0],
                  producer_epoch=producer[1],
                  topics=tuple(m.TxnOffsetCommitRequestTopic(name=t, partitions=tuple(ps))
                               for t, ps in topics.items()))
    if version >= 3:
        fields.update(generation_id=generation, member_id=member_id,
                      group_instance_id=instance)
    return m.TxnOffsetCommitRequest(**fields)


def offset_fetch_request(group, partitions, version=5, require_stable=False):
    """``partitions``: [(topic, partition)], or None for every committed one (v2+);
    ``require_stable`` from v7."""
    m = _m(ApiKey.OFFSET_FETCH, version)
    stable = {"require_stable": require_stable} if version >= 7 else {}
    if partitions is None:
        return m.OffsetFetchRequest(group_id=group, topics=None, **stable)
    topics = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    return m.OffsetFetchRequest(group_id=group, topics=tuple(
        m.OffsetFetchRequestTopic(name=t, partition_indexes=tuple(ps))
        for t, ps in topics.items()), **stable)


def describe_groups_request(groups, version=4):
    m = _m(ApiKey.DESCRIBE_GROUPS, version)
    fields = dict(groups=tuple(groups))
    if version >= 3:
        fields["include_authorized_operations"] = False
    return m.DescribeGroupsRequest(**fields)


def list_groups_request(version=2):
    return _m(ApiKey.LIST_GROUPS, version).ListGroupsRequest()


def delete_groups_request(groups, version=1):
    return _m(ApiKey.DELETE_GROUPS, version).DeleteGroupsRequest(groups_names=tuple(groups))


def offset_delete_request(group, partitions):
    m = _m(ApiKey.OFFSET_DELETE, 0)
    topics = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(
            m.OffsetDeleteRequestPartition(partition_index=partition))
    return m.OffsetDeleteRequest(group_id=group, topics=tuple(
        m.OffsetDeleteRequestTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()))


def committed(response):
    """{(topic, partition): (offset, error code)} of an OffsetFetch response."""
    return {(t.name, p.partition_index): (p.committed_offset, p.error_code)
            for t in response.topics for p in t.partitions}


def commit_errors(response):
    """{(topic, partition): error code} of an OffsetCommit or OffsetDelete response."""
    return {(t.name, p.partition_index): p.error_code
            for t in response.topics for p in t.partitions}
