"""SyncGroup, Heartbeat, LeaveGroup and sessions (Kafka's handleSyncGroup, handleHeartbeat): every
error in Kafka's order, the assignment answered only once stored, session and pending expiry."""
from __future__ import annotations

import pytest

from cluster import errors as e
from replica_proc.group_coordinator import records
from tests.replica_proc.group_coordinator.env import Env


def state(env, group="g"):
    (summary,) = env.coordinator.describe_groups([group])
    return summary.state


@pytest.fixture
def completing(env):
    """A group of a leader and a follower in CompletingRebalance, generation 1."""
    (leader, parked), (follower, _) = [env.new_member() for _ in range(2)]
    env.complete_initial_delay(parked)
    assert state(env) == "CompletingRebalance"
    return env, leader, follower


# -- SyncGroup ------------------------------------------------------------------------------

def test_sync_errors(completing):
    env, leader, follower = completing
    cases = [
        (("", 1, leader), e.InvalidGroupIdError),
        (("other", 1, leader), e.UnknownMemberIdError),
        (("g", 1, "client-unknown"), e.UnknownMemberIdError),
        (("g", 0, leader), e.IllegalGenerationError),
    ]
    for args, error in cases:
        assert env.sync(*args)[0].error == error.errno, args
    assert env.sync("g", 1, leader, protocol_type="connect")[0].error == \
        e.InconsistentGroupProtocolError.errno
    assert env.sync("g", 1, leader, protocol_name="sticky")[0].error == \
        e.InconsistentGroupProtocolError.errno
    # SyncGroup v0-4 name no protocol: nothing to check.
    assert env.sync("g", 1, leader, protocol_type=None, protocol_name=None)[0].error == 0


def test_sync_while_preparing_is_rebalance_in_progress(completing):
    env, leader, follower = completing
    env.join(member_id=leader, protocols=(("range", b"changed"),))
    assert state(env) == "PreparingRebalance"
    assert env.sync("g", 1, follower)[0].error == e.RebalanceInProgressError.errno


def test_sync_fenced_instance():
    env = Env()
    first = env.join(instance="i1")
    env.complete_initial_delay(first)
    old = first[0].member_id
    env.join(instance="i1")  # CompletingRebalance: the restart replaces and rebalances
    assert env.sync("g", 1, old, instance="i1")[0].error == e.FencedInstanceIdError.errno


def test_sync_while_loading_is_rebalance_in_progress_and_elsewhere_not_coordinator():
    env = Env(load=False)
    assert env.sync("g", 1, "m")[0].error == e.NotCoordinatorError.errno
    env.coordinator.begin_load(env.coordinator.partition_of("g"))
    assert env.sync("g", 1, "m")[0].error == e.RebalanceInProgressError.errno


def test_assignment_is_answered_only_once_stored(completing):
    env, leader, follower = completing
    env.store.hold = True
    follower_sync = env.sync("g", 1, follower)
    leader_sync = env.sync("g", 1, leader, {leader: b"L", follower: b"F"})
    assert (follower_sync, leader_sync) == ([], [])
    assert state(env) == "CompletingRebalance"
    ((partition, ((key, value),)),) = env.store.writes[-1:]
    stored = records.decode_value(records.decode_key(key), value)
    assert [(m.member_id, m.assignment) for m in stored.members] == [
        (leader, b"L"), (follower, b"F")]
    env.store.release(0)
    assert (leader_sync[0].error, leader_sync[0].assignment) == (0, b"L")
    assert (follower_sync[0].protocol_name, follower_sync[0].assignment) == ("range", b"F")
    assert state(env) == "Stable"
    # In Stable a SyncGroup returns the assignment at once.
    assert env.sync("g", 1, follower)[0].assignment == b"F"


@pytest.mark.parametrize(("append_error", "answer"), [
    (e.NotEnoughReplicasError, e.CoordinatorNotAvailableError),
    (e.UnknownTopicOrPartitionError, e.CoordinatorNotAvailableError),
    (e.NotLeaderForPartitionError, e.NotCoordinatorError),
    (e.KafkaStorageError, e.NotCoordinatorError),
    (e.RequestTimedOutError, e.RebalanceInProgressError),
    (e.RecordTooLargeError, e.UnknownError),
])
def test_store_failure_answers_every_member_and_rebalances(completing, append_error, answer):
    env, leader, follower = completing
    env.store.hold = True
    follower_sync = env.sync("g", 1, follower)
    leader_sync = env.sync("g", 1, leader, {leader: b"L", follower: b"F"})
    env.store.release(append_error.errno)
    assert [leader_sync[0].error, follower_sync[0].error] == [answer.errno] * 2
    assert leader_sync[0].assignment == b""
    assert state(env) == "PreparingRebalance"


def test_a_store_answer_after_a_new_rebalance_is_ignored(completing):
    env, leader, follower = completing
    env.store.hold = True
    leader_sync = env.sync("g", 1, leader, {leader: b"L"})
    env.join(member_id=follower, protocols=(("range", b"changed"),))
    assert leader_sync[0].error == e.RebalanceInProgressError.errno
    env.store.release(0)
    assert len(leader_sync) == 1 and state(env) == "PreparingRebalance"


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout(completing):
    env, leader, follower = completing
    env.sync("g", 1, leader, {leader: b"L", follower: b"F"})
    assert state(env) == "Stable"
    for _ in range(3):  # the follower heartbeats but never syncs
        env.advance(9)
        assert env.heartbeat("g", 1, follower) == 0
        assert env.heartbeat("g", 1, leader) == 0
    env.advance(3)  # the rebalance timeout (30 s) since the generation formed
    assert env.heartbeat("g", 1, leader) == e.RebalanceInProgressError.errno
    assert env.heartbeat("g", 1, follower) == e.UnknownMemberIdError.errno


# -- Heartbeat -------------------------------------------------------------------------------

def test_heartbeat_errors_in_kafkas_order(completing):
    env, leader, follower = completing
    assert env.heartbeat("", 1, leader) == e.InvalidGroupIdError.errno
    assert env.heartbeat("other", 1, leader) == e.UnknownMemberIdError.errno
    assert env.heartbeat("g", 1, "client-x") == e.UnknownMemberIdError.errno
    assert env.heartbeat("g", 2, leader) == e.IllegalGenerationError.errno
    assert env.heartbeat("g", 1, leader) == 0  # CompletingRebalance
    # An instance id nobody holds (Kafka's validateCurrentMember).
    assert env.heartbeat("g", 1, follower, "i9") == e.UnknownMemberIdError.errno


def test_heartbeat_while_loading_is_fine_elsewhere_not_coordinator():
    env = Env(load=False)
    assert env.heartbeat("g", 1, "m") == e.NotCoordinatorError.errno
    env.coordinator.begin_load(env.coordinator.partition_of("g"))
    assert env.heartbeat("g", 1, "m") == 0


def test_session_expiry_removes_the_member_and_rebalances(env):
    (leader, _), (follower, _) = env.stable_group(count=2)
    for _ in range(3):
        env.advance(3)
        assert env.heartbeat("g", 1, leader) == 0  # the follower is silent
    env.advance(1)  # its 10 s session is over
    assert env.heartbeat("g", 1, leader) == e.RebalanceInProgressError.errno
    assert env.heartbeat("g", 1, follower) == e.UnknownMemberIdError.errno
    (result,) = env.join(member_id=leader)  # alone now: done at once
    assert (result.generation, [m.member_id for m in result.members]) == (2, [leader])


def test_commits_count_as_heartbeats(env):
    ((member, _),) = env.stable_group()
    for _ in range(3):
        env.advance(6)
        assert env.commit("g", {("t", 0): (1, -1, "")}, 1, member) == [{("t", 0): 0}]
    assert env.heartbeat("g", 1, member) == 0


def test_members_parked_in_a_join_do_not_expire(env):
    (leader, _), (follower, _) = env.stable_group(count=2, session_ms=6000,
                                                  rebalance_ms=60_000)
    env.join(member_id=leader)  # parked for up to 60 s
    for _ in range(5):
        env.advance(5)
        env.heartbeat("g", 1, follower)
    assert state(env) == "PreparingRebalance"
    (result,) = env.join(member_id=follower)
    assert result.generation == 2


def test_pending_member_expires_after_its_session_timeout(env):
    (answer,) = env.join(session_ms=6000)
    env.advance(6)
    assert env.join(member_id=answer.member_id)[0].error == e.UnknownMemberIdError.errno


def test_pending_member_holds_the_rebalance_until_it_expires(env):
    ((leader, _),) = env.stable_group(session_ms=6000)
    pending = env.join(session_ms=6000)[0].member_id
    parked = env.join(member_id=leader, protocols=(("range", b"new"),))
    assert parked == [] and state(env) == "PreparingRebalance"
    env.advance(6)  # the pending member never came back
    assert parked[0].generation == 2 and pending not in [m.member_id for m in parked[0].members]


def test_new_member_that_never_rejoins_is_dropped_from_the_rebalance(env):
    ((leader, _),) = env.stable_group(session_ms=6000, rebalance_ms=600_000)
    joined, parked = env.new_member(rebalance_ms=600_000)  # joins, then stops
    for _ in range(60):  # the new member's 5-minute bound; the leader stays alive
        env.advance(5)
        env.heartbeat("g", 1, leader)
    assert parked[0].error == e.UnknownMemberIdError.errno
    assert state(env) == "PreparingRebalance"
    (result,) = env.join(member_id=leader)
    assert [m.member_id for m in result.members] == [leader]


# -- LeaveGroup ------------------------------------------------------------------------------

def test_leave_group(env):
    (leader, _), (follower, _) = env.stable_group(count=2)
    top, members = env.coordinator.leave_group(env.now, "g", [
        (follower, None), ("client-unknown", None), ("", "nobody")])
    assert top == 0
    assert members == [(follower, None, 0), ("client-unknown", None,
                                             e.UnknownMemberIdError.errno),
                       ("", "nobody", e.UnknownMemberIdError.errno)]
    assert state(env) == "PreparingRebalance"
    (result,) = env.join(member_id=leader)
    assert [m.member_id for m in result.members] == [leader]


def test_leave_group_errors():
    env = Env(load=False)
    assert env.coordinator.leave_group(env.now, "g", [("m", None)]) == (
        e.NotCoordinatorError.errno, [])
    env = Env()
    assert env.coordinator.leave_group(env.now, "", [("m", None)]) == (
        e.InvalidGroupIdError.errno, [])
    assert env.coordinator.leave_group(env.now, "nope", [("m", None)]) == (
        0, [("m", None, e.UnknownMemberIdError.errno)])


def test_static_members_leave_by_instance_id_and_fenced_ids_cannot(env):
    first = env.join(instance="i1")
    env.complete_initial_delay(first)
    old = first[0].member_id
    env.sync("g", 1, old, {old: b"a"}, instance="i1")
    new = env.join(instance="i1")[0].member_id  # a restart: no rebalance
    assert env.coordinator.leave_group(env.now, "g", [(old, "i1")])[1] == [
        (old, "i1", e.FencedInstanceIdError.errno)]
    assert state(env) == "Stable"
    assert env.coordinator.leave_group(env.now, "g", [("", "i1")])[1] == [("", "i1", 0)]
    assert env.heartbeat("g", 1, new, "i1") == e.UnknownMemberIdError.errno


def test_pending_member_leaves(env):
    pending = env.join()[0].member_id
    assert env.coordinator.leave_group(env.now, "g", [(pending, None)])[1] == [
        (pending, None, 0)]
    assert env.join(member_id=pending)[0].error == e.UnknownMemberIdError.errno


def test_last_member_leaving_empties_the_group_and_stores_it(env):
    ((member, _),) = env.stable_group()
    env.coordinator.leave_group(env.now, "g", [(member, None)])
    assert state(env) == "Empty"
    partition, ((key, value),) = env.store.writes[-1]
    stored = records.decode_value(records.decode_key(key), value)
    assert (stored.generation, stored.protocol, stored.members) == (2, None, ())


def test_a_member_leaving_while_its_join_is_parked_gets_unknown_member(env):
    (leader, _), (follower, _) = env.stable_group(count=2)
    parked = env.join(member_id=follower, protocols=(("range", b"new"),))
    env.coordinator.leave_group(env.now, "g", [(follower, None)])
    assert (parked[0].error, parked[0].member_id) == (e.UnknownMemberIdError.errno, "")


def test_a_failed_write_of_the_empty_generation_is_only_logged(env, caplog):
    ((member, _),) = env.stable_group()
    env.store.error = e.NotEnoughReplicasError.errno
    env.coordinator.leave_group(env.now, "g", [(member, None)])
    assert state(env) == "Empty"
    assert "writing to __consumer_offsets failed with error 19" in caplog.text
