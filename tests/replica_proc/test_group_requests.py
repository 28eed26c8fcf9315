"""The group coordinator in the broker, through the request handler in one process: real
``__consumer_offsets`` logs, encoded request frames, a fake connection, fake clocks, and a
fake controller that records the topic creation asked of it (FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, OffsetCommit)."""
from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from cluster.metadata.model import (
    GROUP_METADATA_TOPIC,
    TRANSACTION_STATE_TOPIC,
    BrokerInfo,
)
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.coordinator_common.partitioning import partition_for
from replica_proc.group_coordinator import records
from segments.record.records import RecordBatchBuilder, iter_records
from shm_ring.naming import listener_name
from tests.support.broker import api_versions_request, batch, fetch_request, produce_request
from tests.support.clock import T0
from tests.support.groups import (
    commit_errors,
    committed,
    delete_groups_request,
    describe_groups_request,
    find_coordinator_request,
    heartbeat_request,
    join_group_request,
    leave_group_request,
    list_groups_request,
    offset_commit_request,
    offset_delete_request,
    offset_fetch_request,
    sync_group_request,
    txn_offset_commit_request,
)
from tests.support.handlers import HandlerEnv

CLUSTER = "group-cluster"
PARTITIONS = 3
GROUP = "g"
DELAY_MS = 100  # group.initial.rebalance.delay.ms
COMMIT_TIMEOUT_MS = 5000


class FakeController:
    """An active controller that records the topics it is asked to create."""

    active = True

    def __init__(self):
        self.created = []

    def create_topics(self, specs, validate_only):
        self.created += specs
        return {spec["name"]: (0, None) for spec in specs}

    def poll(self, now):
        pass


class Env(HandlerEnv):
    """A broker's request handler over real logs; ``publish`` sets the image."""

    def __init__(self, tmp_path):
        self.controller = FakeController()
        super().__init__(tmp_path, CLUSTER, {
            "offsets.topic.num.partitions": PARTITIONS,
            "group.initial.rebalance.delay.ms": DELAY_MS,
            "offsets.commit.timeout.ms": COMMIT_TIMEOUT_MS}, controller=self.controller)

    def publish(self, name, partitions, epoch=0, brokers=(0, 1, 2)):
        """Publish ``name`` with ``partitions`` = [(leader, replicas)]."""
        self.publish_topic(name, [self.state(name, i, leader, epoch, replicas)
                                  for i, (leader, replicas) in enumerate(partitions)],
                           alive=brokers, controller_id=0)

    def publish_offsets(self, replicas=(0,), leader=0, epoch=0):
        self.publish(GROUP_METADATA_TOPIC, [(leader, replicas)] * PARTITIONS, epoch)

    def advance(self, seconds):
        self.clock.now += seconds
        self.wall.now += round(seconds * 1000)
        self.handler.expire(self.clock.now)

    def join(self, member_id=""):
        """A member joining alone, through the initial delay: the JoinGroup answer."""
        channel = self.channel()
        request = self.send(channel, join_group_request(GROUP, member_id))
        assert channel.parked is not None and channel.conn.responses == []
        self.advance(DELAY_MS / 1000)
        assert channel.parked is None
        return self.answer(channel, request)

    def join_and_sync(self, assignment=b"assigned"):
        required = self.call(join_group_request(GROUP))
        assert required.error_code == ErrorCode.member_id_required
        joined = self.join(required.member_id)
        synced = self.call(sync_group_request(GROUP, joined.generation_id, joined.member_id,
                                              [(joined.member_id, assignment)]))
        assert synced.error_code == ErrorCode.none
        return joined

    def follower_fetch(self, replica, offset, partition):
        channel = self.channel(f"follower-{replica}")
        self.send(channel, fetch_request([(GROUP_METADATA_TOPIC, partition, offset)],
                                         replica_id=replica))



@pytest.fixture
def env(tmp_path):
    env = Env(tmp_path)
    yield env
    env.close()


def group_partition():
    return partition_for(GROUP, PARTITIONS)


def stored_records(env):
    """The (key, value) records of the group's __consumer_offsets partition, decoded."""
    log = env.replicas.partition(GROUP_METADATA_TOPIC, group_partition()).log
    data = log.read(log.log_start_offset, 1 << 20)
    decoded = []
    for record in iter_records(data):
        key = records.decode_key(record.key)
        decoded.append((key, records.decode_value(key, record.value)))
    return decoded


# -- FindCoordinator and the topic ------------------------------------------------------------

def test_the_first_find_coordinator_creates_the_offsets_topic(env):
    env.publish("t", [(0, (0,))])
    answer = env.call(find_coordinator_request(GROUP))
    assert (answer.error_code, answer.node_id) == (ErrorCode.coordinator_not_available, -1)
    assert env.controller.created == [{
        "name": GROUP_METADATA_TOPIC, "num_partitions": PARTITIONS,
        "replication_factor": 3,
        "configs": {"cleanup.policy": "compact", "segment.bytes": "104857600"}}]


def test_the_replication_factor_is_capped_by_the_live_brokers(env):
    env.publish("t", [(0, (0,))])
    env.image = env.image.replace(version=env.image.version + 1, brokers={
        0: BrokerInfo(0, 0, True), 1: BrokerInfo(1, 0, False)})
    env.handler.refresh_metadata()
    env.call(offset_fetch_request(GROUP, [("t", 0)]))  # any group request creates it
    [spec] = env.controller.created
    assert spec["replication_factor"] == 1


def test_find_coordinator_names_the_leader_of_the_groups_partition(env):
    env.publish(GROUP_METADATA_TOPIC, [(0, (0, 1)), (1, (1, 0)), (2, (2, 0))])
    for version in (0, 1, 2):
        answer = env.call(find_coordinator_request(GROUP, version=version))
        leader = group_partition()
        assert (answer.error_code, answer.node_id, answer.port) == (ErrorCode.none, leader,
                                                                    leader)
        assert answer.host == listener_name(CLUSTER, leader)  # as Metadata describes it
    assert env.controller.created == []
    # a transactional id's coordinator: __transaction_state is created on first use
    answer = env.call(find_coordinator_request("txn", key_type=1))
    assert (answer.error_code, answer.node_id) == (ErrorCode.coordinator_not_available, -1)
    assert TRANSACTION_STATE_TOPIC in answer.error_message
    assert [spec["name"] for spec in env.controller.created] == [TRANSACTION_STATE_TOPIC]


def test_a_coordinator_without_a_live_leader_is_not_available(env):
    env.publish(GROUP_METADATA_TOPIC, [(1, (1, 0))] * PARTITIONS, brokers=(0,))
    answer = env.call(find_coordinator_request(GROUP))
    assert answer.error_code == ErrorCode.coordinator_not_available


def test_api_versions_advertises_the_group_apis(env):
    answer = env.call(api_versions_request())
    served = {entry.api_key: (entry.min_version, entry.max_version)
              for entry in answer.api_keys}
    for key in (ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP,
                ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT,
                ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS,
                ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE):
        assert served[key] == protocol.SUPPORTED_VERSIONS[key]


# -- membership --------------------------------------------------------------------------------

def test_join_sync_heartbeat_and_leave(env):
    env.publish_offsets()
    required = env.call(join_group_request(GROUP))
    assert required.error_code == ErrorCode.member_id_required
    assert required.member_id.startswith("client-1-")
    joined = env.join(required.member_id)  # parked through the initial delay
    assert (joined.error_code, joined.generation_id, joined.leader, joined.protocol_name) == (
        ErrorCode.none, 1, required.member_id, "range")
    assert [(m.member_id, m.metadata) for m in joined.members] == [
        (required.member_id, b"subscription")]
    synced = env.call(sync_group_request(GROUP, 1, joined.member_id,
                                         [(joined.member_id, b"assigned")]))
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"assigned")
    [(key, value)] = stored_records(env)  # the group's record, written before the answer
    assert key == records.GroupMetadataKey(GROUP)
    assert (value.generation, value.leader, value.members[0].assignment) == (
        1, joined.member_id, b"assigned")
    assert env.call(heartbeat_request(GROUP, 1, joined.member_id)).error_code == ErrorCode.none
    assert env.call(heartbeat_request(GROUP, 0, joined.member_id)).error_code == \
        ErrorCode.illegal_generation
    assert env.call(heartbeat_request(GROUP, 1, "nobody")).error_code == \
        ErrorCode.unknown_member_id
    [group] = env.call(describe_groups_request([GROUP])).groups
    assert (group.group_state, group.protocol_data) == ("Stable", "range")
    assert [(m.member_id, m.member_assignment, m.client_id) for m in group.members] == [
        (joined.member_id, b"assigned", "client-1")]
    listed = env.call(list_groups_request())
    assert [(g.group_id, g.protocol_type) for g in listed.groups] == [(GROUP, "consumer")]
    for version in (1, 3):
        answer = env.call(leave_group_request(GROUP, joined.member_id, version=version))
        assert answer.error_code == ErrorCode.none
        if version == 3:
            [member] = answer.members
            assert member.error_code == ErrorCode.unknown_member_id  # already gone
    [group] = env.call(describe_groups_request([GROUP])).groups
    assert group.group_state == "Empty"


def test_an_invalid_session_timeout_and_an_unknown_group(env):
    env.publish_offsets()
    answer = env.call(join_group_request(GROUP, session_ms=1000))
    assert answer.error_code == ErrorCode.invalid_session_timeout
    answer = env.call(join_group_request("", version=5))
    assert answer.error_code == ErrorCode.invalid_group_id
    [group] = env.call(describe_groups_request(["nobody"])).groups
    assert (group.error_code, group.group_state) == (ErrorCode.none, "Dead")


def test_a_second_member_rebalances_the_group_and_the_first_learns_it_by_heartbeat(env):
    env.publish_offsets()
    first = env.join_and_sync()
    second = env.channel("second")
    required = env.call(join_group_request(GROUP), second)
    request = env.send(second, join_group_request(GROUP, required.member_id))
    assert second.parked is not None  # waiting for the first member to rejoin
    assert env.call(heartbeat_request(GROUP, 1, first.member_id)).error_code == \
        ErrorCode.rebalance_in_progress
    rejoined = env.call(join_group_request(GROUP, first.member_id))
    assert (rejoined.generation_id, rejoined.leader, len(rejoined.members)) == (
        2, first.member_id, 2)
    joined = env.answer(second, request)
    assert (joined.generation_id, joined.leader, joined.members) == (2, first.member_id, ())
    follower_sync = env.channel("second")
    sync = env.send(follower_sync, sync_group_request(GROUP, 2, joined.member_id))
    assert follower_sync.parked is not None  # until the leader's assignment is stored
    leader_sync = env.call(sync_group_request(GROUP, 2, first.member_id, [
        (first.member_id, b"a1"), (joined.member_id, b"a2")]))
    assert leader_sync.assignment == b"a1"
    assert env.answer(follower_sync, sync).assignment == b"a2"


def test_a_member_whose_session_runs_out_is_removed(env):
    env.publish_offsets()
    joined = env.join_and_sync()
    env.advance(10.0)  # the session timeout: no heartbeat
    assert env.call(heartbeat_request(GROUP, 1, joined.member_id)).error_code == \
        ErrorCode.unknown_member_id
    [group] = env.call(describe_groups_request([GROUP])).groups
    assert (group.group_state, group.members) == ("Empty", ())


def test_a_parked_join_of_a_client_that_went_away_is_dropped(env):
    env.publish_offsets()
    required = env.call(join_group_request(GROUP))
    channel = env.channel()
    env.send(channel, join_group_request(GROUP, required.member_id))
    assert channel.parked is not None
    env.handler.cancel(channel)
    env.advance(DELAY_MS / 1000)  # the coordinator answers, into nothing
    assert channel.conn.responses == [] and channel.parked is None


# -- replication of the group's records --------------------------------------------------------

def test_sync_and_commit_wait_for_the_isr_then_answer(env):
    env.publish("t", [(0, (0,))])
    env.publish_offsets(replicas=(0, 1))
    partition = group_partition()
    required = env.call(join_group_request(GROUP))
    joined = env.join(required.member_id)
    channel = env.channel()
    sync = env.send(channel, sync_group_request(GROUP, 1, joined.member_id,
                                                [(joined.member_id, b"mine")]))
    assert channel.parked is not None and channel.conn.responses == []
    assert channel.next_request() is None  # muted: responses leave in request order
    env.follower_fetch(1, 1, partition)  # the follower has the group's record: HW 1
    assert channel.parked is None
    assert env.answer(channel, sync).assignment == b"mine"
    commit = env.send(channel, offset_commit_request(GROUP, {("t", 0): 42}, 1,
                                                     joined.member_id))
    assert channel.parked is not None
    fetched = env.call(offset_fetch_request(GROUP, [("t", 0)]))
    assert committed(fetched) == {("t", 0): (-1, ErrorCode.none)}  # not yet replicated
    env.follower_fetch(1, 2, partition)
    assert commit_errors(env.answer(channel, commit)) == {("t", 0): ErrorCode.none}
    fetched = env.call(offset_fetch_request(GROUP, [("t", 0)]))
    assert committed(fetched) == {("t", 0): (42, ErrorCode.none)}


def test_a_commit_not_replicated_in_time_is_request_timed_out(env):
    env.publish("t", [(0, (0,))])
    env.publish_offsets(replicas=(0, 1))
    channel = env.channel()
    commit = env.send(channel, offset_commit_request(GROUP, {("t", 0): 7}))
    assert channel.parked is not None
    assert env.handler.next_deadline() <= env.clock.now + COMMIT_TIMEOUT_MS / 1000
    env.advance(COMMIT_TIMEOUT_MS / 1000)
    assert commit_errors(env.answer(channel, commit)) == {
        ("t", 0): ErrorCode.request_timed_out}
    fetched = env.call(offset_fetch_request(GROUP, [("t", 0)]))
    assert committed(fetched) == {("t", 0): (-1, ErrorCode.none)}


def test_losing_leadership_answers_parked_writes_not_coordinator(env):
    env.publish("t", [(0, (0,))])
    env.publish_offsets(replicas=(0, 1))
    channel = env.channel()
    commit = env.send(channel, offset_commit_request(GROUP, {("t", 0): 7}))
    assert channel.parked is not None
    env.publish_offsets(replicas=(0, 1), leader=1, epoch=1)
    assert commit_errors(env.answer(channel, commit)) == {("t", 0): ErrorCode.not_coordinator}
    assert env.call(join_group_request(GROUP)).error_code == ErrorCode.not_coordinator
    assert env.call(find_coordinator_request(GROUP)).node_id == 1


def test_a_new_leader_loads_the_groups_and_offsets_from_its_log(env):
    env.publish("t", [(0, (0,)), (0, (0,))])
    env.publish_offsets()
    joined = env.join_and_sync(b"kept")
    answer = env.call(offset_commit_request(GROUP, {("t", 0): 5, ("t", 1): 6}, 1,
                                            joined.member_id))
    assert set(commit_errors(answer).values()) == {ErrorCode.none}
    env.call(offset_commit_request(GROUP, {("t", 1): 9}, 1, joined.member_id))
    env.publish_offsets(leader=1, epoch=1)  # moved away: unloaded
    assert env.call(offset_fetch_request(GROUP, None)).error_code == ErrorCode.not_coordinator
    env.publish_offsets(leader=0, epoch=2)  # back: loaded from the log
    fetched = env.call(offset_fetch_request(GROUP, None))
    assert committed(fetched) == {("t", 0): (5, ErrorCode.none), ("t", 1): (9, ErrorCode.none)}
    [group] = env.call(describe_groups_request([GROUP])).groups
    assert (group.group_state, [m.member_assignment for m in group.members]) == (
        "Stable", [b"kept"])
    assert env.call(heartbeat_request(GROUP, 1, joined.member_id)).error_code == \
        ErrorCode.none


# -- offsets and administration ----------------------------------------------------------------

@pytest.mark.parametrize("version", [2, 5, 7])
def test_offset_commit_and_fetch_across_versions(env, version):
    env.publish("t", [(0, (0,))])
    env.publish_offsets()
    answer = env.call(offset_commit_request(GROUP, {("t", 0): 3, ("nope", 0): 1},
                                            version=version))
    assert commit_errors(answer) == {("t", 0): ErrorCode.none,
                                     ("nope", 0): ErrorCode.unknown_topic_or_partition}
    for fetch_version in (1, 5):
        fetched = env.call(offset_fetch_request(GROUP, [("t", 0), ("t", 1)],
                                                version=fetch_version))
        assert committed(fetched) == {("t", 0): (3, ErrorCode.none),
                                      ("t", 1): (-1, ErrorCode.none)}


def test_commits_with_a_generation_need_a_member(env):
    env.publish("t", [(0, (0,))])
    env.publish_offsets()
    joined = env.join_and_sync()
    answer = env.call(offset_commit_request(GROUP, {("t", 0): 3}, 0, joined.member_id))
    assert commit_errors(answer) == {("t", 0): ErrorCode.illegal_generation}
    answer = env.call(offset_commit_request(GROUP, {("t", 0): 3}))  # -1: only when Empty
    assert commit_errors(answer) == {("t", 0): ErrorCode.unknown_member_id}


def test_txn_offset_commit_v3_checks_the_member_and_offset_fetch_v7_the_stability(env):
    """KIP-447 through the handler: TxnOffsetCommit v3 (flexible) refuses a stale
    generation and an unknown member; OffsetFetch v7 with require_stable answers a partition
    whose offset waits for its transaction UNSTABLE_OFFSET_COMMIT, v5 and v7 without it the
    committed offset."""
    env.publish("t", [(0, (0,)), (0, (0,))])
    env.publish_offsets()
    env.call(offset_commit_request(GROUP, {("t", 0): 3, ("t", 1): 4}))
    joined = env.join_and_sync()
    stale = env.call(txn_offset_commit_request(GROUP, {("t", 0): 8}, generation=0,
                                               member_id=joined.member_id))
    assert commit_errors(stale) == {("t", 0): ErrorCode.illegal_generation}
    unknown = env.call(txn_offset_commit_request(GROUP, {("t", 0): 8},
                                                 generation=joined.generation_id,
                                                 member_id="zombie"))
    assert commit_errors(unknown) == {("t", 0): ErrorCode.unknown_member_id}
    current = env.call(txn_offset_commit_request(GROUP, {("t", 0): 8},
                                                 generation=joined.generation_id,
                                                 member_id=joined.member_id))
    assert commit_errors(current) == {("t", 0): ErrorCode.none}
    asked = [("t", 0), ("t", 1)]
    stable = env.call(offset_fetch_request(GROUP, asked, version=7, require_stable=True))
    assert committed(stable) == {("t", 0): (-1, ErrorCode.unstable_offset_commit),
                                 ("t", 1): (4, ErrorCode.none)}
    for version, require_stable in ((5, False), (6, False), (7, False)):
        fetched = env.call(offset_fetch_request(GROUP, asked, version, require_stable))
        assert committed(fetched) == {("t", 0): (3, ErrorCode.none),
                                      ("t", 1): (4, ErrorCode.none)}
    v2 = env.call(txn_offset_commit_request(GROUP, {("t", 1): 9}, version=2))
    assert commit_errors(v2) == {("t", 1): ErrorCode.none}  # no member: not checked


def test_offset_fetch_v1_carries_the_group_error_in_each_partition(env):
    env.publish_offsets(leader=1)
    fetched = env.call(offset_fetch_request(GROUP, [("t", 0)], version=1))
    assert committed(fetched) == {("t", 0): (-1, ErrorCode.not_coordinator)}
    fetched = env.call(offset_fetch_request(GROUP, [("t", 0)], version=5))
    assert fetched.error_code == ErrorCode.not_coordinator and fetched.topics == ()


def test_offset_delete_and_delete_groups(env):
    env.publish("t", [(0, (0,)), (0, (0,))])
    env.publish_offsets()
    env.call(offset_commit_request(GROUP, {("t", 0): 3, ("t", 1): 4}))
    answer = env.call(offset_delete_request(GROUP, [("t", 0), ("zz", 0)]))
    assert answer.error_code == ErrorCode.none
    assert commit_errors(answer) == {("t", 0): ErrorCode.none,
                                     ("zz", 0): ErrorCode.unknown_topic_or_partition}
    assert committed(env.call(offset_fetch_request(GROUP, None))) == {
        ("t", 1): (4, ErrorCode.none)}
    answer = env.call(delete_groups_request([GROUP, "unknown"]))
    assert [(r.group_id, r.error_code) for r in answer.results] == [
        (GROUP, ErrorCode.none), ("unknown", ErrorCode.group_id_not_found)]
    assert committed(env.call(offset_fetch_request(GROUP, None))) == {}
    key, value = stored_records(env)[-1]
    assert key == records.OffsetCommitKey(GROUP, "t", 1) and value is None  # a tombstone


def test_an_active_group_cannot_be_deleted(env):
    env.publish_offsets()
    env.join_and_sync()
    answer = env.call(delete_groups_request([GROUP], version=0))
    assert [(r.group_id, r.error_code) for r in answer.results] == [
        (GROUP, ErrorCode.non_empty_group)]


def test_a_static_member_rejoining_fences_its_old_id(env):
    env.publish_offsets()
    channel = env.channel()
    request = env.send(channel, join_group_request(GROUP, instance="i-1"))
    env.advance(DELAY_MS / 1000)  # a static member needs no MEMBER_ID_REQUIRED round
    first = env.answer(channel, request)
    assert (first.error_code, first.generation_id) == (ErrorCode.none, 1)
    assert [(m.member_id, m.group_instance_id) for m in first.members] == [
        (first.member_id, "i-1")]
    env.call(sync_group_request(GROUP, 1, first.member_id, [(first.member_id, b"a")],
                                instance="i-1"))
    again = env.call(join_group_request(GROUP, instance="i-1"))  # restarted: no member id
    assert again.error_code == ErrorCode.none and again.member_id != first.member_id
    assert again.generation_id == 1  # Stable: no rebalance
    answer = env.call(sync_group_request(GROUP, 1, first.member_id, instance="i-1"))
    assert answer.error_code == ErrorCode.fenced_instance_id


def test_a_join_without_a_common_protocol_is_inconsistent(env):
    env.publish_offsets()
    env.join_and_sync()
    answer = env.call(join_group_request(GROUP, protocols=(("roundrobin", b""),)))
    assert answer.error_code == ErrorCode.inconsistent_group_protocol


def test_clients_cannot_produce_to_the_offsets_topic(env):
    env.publish_offsets()
    answer = env.call(produce_request(GROUP_METADATA_TOPIC, 0, batch([b"x"])))
    [topic] = answer.responses
    [partition] = topic.partition_responses
    assert partition.error_code == ErrorCode.invalid_topic_exception
    assert "internal topic" in partition.error_message


def test_a_commit_between_join_and_sync_is_rebalance_in_progress(env):
    env.publish("t", [(0, (0,))])
    env.publish_offsets()
    required = env.call(join_group_request(GROUP))
    joined = env.join(required.member_id)  # CompletingRebalance until the leader syncs
    answer = env.call(offset_commit_request(GROUP, {("t", 0): 3}, 1, joined.member_id))
    assert commit_errors(answer) == {("t", 0): ErrorCode.rebalance_in_progress}


def test_a_record_that_does_not_decode_is_skipped_when_loading(env):
    env.publish("t", [(0, (0,))])
    env.publish_offsets()
    env.call(offset_commit_request(GROUP, {("t", 0): 11}))
    partition = env.replicas.partition(GROUP_METADATA_TOPIC, group_partition())
    junk = RecordBatchBuilder()
    junk.append(T0, b"\x00\x09not-a-key", b"value")
    partition.log.append(junk.build(), leader_epoch=0)
    env.publish_offsets(leader=1, epoch=1)
    env.publish_offsets(leader=0, epoch=2)
    fetched = env.call(offset_fetch_request(GROUP, None))
    assert committed(fetched) == {("t", 0): (11, ErrorCode.none)}
