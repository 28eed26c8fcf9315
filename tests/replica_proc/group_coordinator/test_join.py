"""JoinGroup and rebalances (Kafka's GroupCoordinator.handleJoinGroup, KIP-345): every error, the
initial delay, the rebalance timeout, leader election, the protocol vote, static members."""
from __future__ import annotations

import re

import pytest

from cluster import errors as e
from replica_proc.group_coordinator import records
from replica_proc.group_coordinator.group import GroupState
from tests.replica_proc.group_coordinator.env import RANGE, Env


def state(env, group="g"):
    (summary,) = env.coordinator.describe_groups([group])
    return summary.state


@pytest.mark.parametrize(("join", "error"), [
    ({"group": ""}, e.InvalidGroupIdError),
    ({"session_ms": 5999}, e.InvalidSessionTimeoutError),
    ({"session_ms": 1_800_001}, e.InvalidSessionTimeoutError),
    ({"member_id": "client-nobody"}, e.UnknownMemberIdError),
    ({"protocols": []}, e.InconsistentGroupProtocolError),
    ({"protocol_type": ""}, e.InconsistentGroupProtocolError),
])
def test_join_errors_of_a_new_group(env, join, error):
    (answer,) = env.join(**join)
    assert answer.error == error.errno
    assert (answer.generation, answer.leader, answer.members) == (-1, "", ())


def test_not_coordinator_and_loading():
    env = Env(load=False)
    assert env.join()[0].error == e.NotCoordinatorError.errno
    env.coordinator.begin_load(env.coordinator.partition_of("g"))
    assert env.join()[0].error == e.CoordinatorLoadInProgressError.errno
    assert env.coordinator.error_for("g") == e.CoordinatorLoadInProgressError.errno


def test_member_id_required_names_the_client(env):
    (answer,) = env.join(client_id="app")
    assert answer.error == e.MemberIdRequiredError.errno
    assert re.fullmatch(r"app-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}",
                        answer.member_id)


def test_three_members_rebalance_end_to_end(env):
    joined = []
    for client in ("a", "b", "c"):
        (first,) = env.join(client_id=client)
        assert first.error == e.MemberIdRequiredError.errno
        parked = env.join(member_id=first.member_id, client_id=client)
        assert parked == []
        joined.append((first.member_id, parked))
    assert state(env) == "PreparingRebalance"
    env.advance(3)  # the initial delay; b and c joined during it: 3 s more
    assert state(env) == "PreparingRebalance"
    assert [answers for _, answers in joined] == [[], [], []]
    env.advance(3)
    assert state(env) == "CompletingRebalance"
    results = [answers[0] for _, answers in joined]
    assert [r.error for r in results] == [0, 0, 0]
    assert {r.generation for r in results} == {1}
    assert {r.protocol_name for r in results} == {"range"}
    assert {r.protocol_type for r in results} == {"consumer"}
    assert {r.leader for r in results} == {joined[0][0]}
    leader, *followers = results
    assert [(m.member_id, m.metadata) for m in leader.members] == [
        (member_id, b"range-metadata") for member_id, _ in joined]
    assert [f.members for f in followers] == [(), ()]
    # Followers sync first and wait for the leader.
    assert env.sync("g", 1, followers[0].member_id) == []
    assignments = {r.member_id: r.member_id.encode() for r in results[:2]}
    leader_answer = env.sync("g", 1, leader.member_id, assignments)
    assert leader_answer[0].assignment == leader.member_id.encode()
    assert env.sync("g", 1, followers[1].member_id)[0].assignment == b""  # left out
    assert state(env) == "Stable"
    partition, pairs = env.store.writes[-1]
    assert partition == env.coordinator.partition_of("g")
    ((key, value),) = pairs
    stored = records.decode_value(records.decode_key(key), value)
    assert (stored.generation, stored.protocol, stored.leader) == (1, "range", leader.member_id)
    assert [(m.member_id, m.subscription, m.assignment) for m in stored.members] == [
        (r.member_id, b"range-metadata", assignments.get(r.member_id, b"")) for r in results]


def test_joins_without_member_id_required(env):
    parked = env.join(require_known=False, client_id="old")  # JoinGroup v0-3
    env.advance(3)
    (answer,) = parked
    assert answer.error == 0 and answer.member_id.startswith("old-")
    assert state(env) == "CompletingRebalance"


def test_initial_delay_is_extended_per_joiner_up_to_the_rebalance_timeout(env):
    env.new_member(rebalance_ms=10_000)
    env.advance(2)
    env.new_member(rebalance_ms=10_000)  # joins during the delay: 3 s more
    env.advance(1)
    assert state(env) == "PreparingRebalance"
    env.advance(2.9)
    assert state(env) == "PreparingRebalance"
    env.advance(0.1)
    assert state(env) == "CompletingRebalance"


def test_initial_delay_extension_is_bounded(env):
    env.new_member(rebalance_ms=4000)  # 3 s delay, then at most 1 s more
    env.advance(1)
    env.new_member(rebalance_ms=4000)
    env.advance(2)
    assert state(env) == "PreparingRebalance"
    env.advance(1)
    assert state(env) == "CompletingRebalance"


def test_dynamic_members_not_rejoining_are_removed(env):
    (leader, _), (follower, _) = env.stable_group(count=2, rebalance_ms=20_000,
                                                  session_ms=25_000)
    joined, parked = env.new_member(rebalance_ms=20_000)  # a third member: a rebalance
    assert parked == [] and state(env) == "PreparingRebalance"
    assert env.heartbeat("g", 1, leader) == e.RebalanceInProgressError.errno
    leader_join = env.join(member_id=leader)
    env.advance(19.9)
    assert state(env) == "PreparingRebalance"
    env.advance(0.2)  # the rebalance timeout (20 s): the follower did not rejoin
    (result,) = leader_join
    assert result.generation == 2 and result.leader == leader
    assert [m.member_id for m in result.members] == [leader, joined]
    assert env.heartbeat("g", 2, follower) == e.UnknownMemberIdError.errno


def test_rebalance_completes_as_soon_as_all_rejoined(env):
    (leader, _), (follower, _) = env.stable_group(count=2)
    assert env.join(member_id=leader) == []  # the leader asks for a rebalance
    (result,) = env.join(member_id=follower)
    assert (result.generation, result.members) == (2, ())
    assert state(env) == "CompletingRebalance"


def test_a_new_leader_when_the_leader_does_not_rejoin(env):
    (leader, _), (follower, _) = env.stable_group(count=2)
    env.join(member_id=follower, protocols=(("range", b"changed"),))
    env.advance(30)
    assert env.heartbeat("g", 2, leader) == e.UnknownMemberIdError.errno
    (summary,) = env.coordinator.describe_groups(["g"])
    assert [m.member_id for m in summary.members] == [follower]
    assert env.sync("g", 2, follower, {follower: b"x"})[0].assignment == b"x"


def test_protocol_vote(env):
    both = (("range", b"r"), ("roundrobin", b"rr"))
    env.new_member(protocols=both)
    env.new_member(protocols=(("roundrobin", b"rr"), ("range", b"r")))
    joined, parked = env.new_member(protocols=(("roundrobin", b"rr"), ("sticky", b"s")))
    env.complete_initial_delay(parked)
    (summary,) = env.coordinator.list_groups()[1]
    assert summary.state == "CompletingRebalance"
    assert env.sync("g", 1, joined, protocol_name="range")[0].error == \
        e.InconsistentGroupProtocolError.errno
    assert env.sync("g", 1, joined, protocol_name="roundrobin") == []


def test_inconsistent_protocols_of_a_joiner(env):
    env.stable_group()
    assert env.join(protocols=(("sticky", b"s"),))[0].error == \
        e.InconsistentGroupProtocolError.errno
    assert env.join(protocol_type="connect")[0].error == e.InconsistentGroupProtocolError.errno


def test_unknown_member_of_an_existing_group(env):
    env.stable_group()
    assert env.join(member_id="client-unknown")[0].error == e.UnknownMemberIdError.errno


def test_follower_rejoining_stable_with_same_metadata_keeps_the_generation(env):
    (leader, _), (follower, first) = env.stable_group(count=2)
    (again,) = env.join(member_id=follower)
    assert (again.error, again.generation, again.leader, again.members) == (0, 1, leader, ())
    assert state(env) == "Stable"
    env.join(member_id=follower, protocols=(("range", b"new topics"),))
    assert state(env) == "PreparingRebalance"


def test_rejoin_during_completing_rebalance_with_same_metadata(env):
    (leader, _), (follower, _) = env.stable_group(count=2)
    env.join(member_id=leader)
    env.join(member_id=follower)
    assert state(env) == "CompletingRebalance"
    (again,) = env.join(member_id=leader)  # its response was lost
    assert (again.generation, [m.member_id for m in again.members]) == (2, [leader, follower])
    assert env.join(member_id=follower, protocols=(("range", b"other"),)) == []
    assert state(env) == "PreparingRebalance"


def test_group_max_size():
    env = Env(group_max_size=2)
    (a, _), (b, _) = env.stable_group(count=2)
    (refused,) = env.join()
    assert (refused.error, refused.member_id) == (e.GroupMaxSizeReachedError.errno, "")
    assert env.join(member_id=a) == []  # members are always accepted
    assert state(env) == "PreparingRebalance"


def test_pending_member_with_an_instance_id_is_refused(env):
    member_id = env.join()[0].member_id
    assert env.join(member_id=member_id, instance=("i"))[0].error == e.UnknownError.errno


# -- static members (KIP-345) -----------------------------------------------------------

def static_group(env, instances=("i1", "i2"), session_ms=10_000, protocols=RANGE):
    joined = [env.join(instance=i, client_id=i, session_ms=session_ms, protocols=protocols)
              for i in instances]
    env.complete_initial_delay(joined[0])
    results = [answers[0] for answers in joined]
    env.sync("g", 1, results[0].leader, {r.member_id: r.member_id.encode() for r in results})
    for r in results[1:]:
        env.sync("g", 1, r.member_id)
    assert state(env) == "Stable"
    return [r.member_id for r in results]


def test_static_members_join_without_member_id_required(env):
    parked = env.join(instance="i1")
    assert parked == []  # not MEMBER_ID_REQUIRED: parked at once
    env.advance(3)
    assert parked[0].member_id.startswith("i1-")
    assert state(env) == "CompletingRebalance"


def test_static_restart_in_stable_gets_a_new_id_without_rebalance(env):
    leader, follower = static_group(env)
    writes = len(env.store.writes)
    (answer,) = env.join(instance="i2", client_id="i2")
    assert answer.error == 0 and answer.member_id not in (leader, follower)
    assert answer.member_id.startswith("i2-")
    assert (answer.generation, answer.leader, answer.members) == (1, leader, ())
    assert state(env) == "Stable"
    # The old id is fenced everywhere; the new one carries on with the old assignment.
    assert env.heartbeat("g", 1, follower, "i2") == e.FencedInstanceIdError.errno
    assert env.sync("g", 1, follower, instance="i2")[0].error == e.FencedInstanceIdError.errno
    assert env.join(member_id=follower, instance="i2")[0].error == \
        e.FencedInstanceIdError.errno
    assert env.heartbeat("g", 1, answer.member_id, "i2") == 0
    assert env.sync("g", 1, answer.member_id, instance="i2")[0].assignment == follower.encode()
    # The new id is stored.
    ((key, value),) = env.store.writes[writes][1]
    stored = records.decode_value(records.decode_key(key), value)
    assert [m.member_id for m in stored.members] == [leader, answer.member_id]


def test_static_leader_restart_keeps_the_old_leader_id_in_the_answer(env):
    leader, _ = static_group(env)
    (answer,) = env.join(instance="i1", client_id="i1")
    assert answer.leader == leader != answer.member_id  # so it runs no assignment
    (summary,) = env.coordinator.describe_groups(["g"])
    assert summary.members[0].member_id == answer.member_id


def test_static_restart_store_failure_reverts(env):
    leader, follower = static_group(env)
    env.store.error = e.NotEnoughReplicasError.errno
    (answer,) = env.join(instance="i2", client_id="i2")
    assert (answer.error, answer.member_id) == (e.CoordinatorNotAvailableError.errno, "")
    env.store.error = 0
    assert env.heartbeat("g", 1, follower, "i2") == 0  # the old id is still the member


def test_static_restart_with_new_protocols_rebalances_only_if_the_vote_changes(env):
    both = (("range", b"r"), ("sticky", b"s"))
    static_group(env, protocols=both)
    (answer,) = env.join(instance="i2", protocols=(("sticky", b"s"), ("range", b"r")))
    assert (answer.error, answer.protocol_name) == (0, "range")  # a 1-1 vote: range stays
    assert state(env) == "Stable"
    (answer,) = env.join(instance="i3", protocols=(("roundrobin", b"rr"),))
    assert answer.error == e.InconsistentGroupProtocolError.errno
    env2 = Env()
    static_group(env2, instances=("i1", "i2", "i3"), protocols=both)
    env2.join(instance="i2", protocols=(("sticky", b"s"), ("range", b"r")))
    assert state(env2) == "Stable"
    assert env2.join(instance="i3", protocols=(("sticky", b"s"), ("range", b"r"))) == []
    assert state(env2) == "PreparingRebalance"  # sticky now wins 2-1


def test_static_members_not_rejoining_are_kept(env):
    _, follower = static_group(env, session_ms=60_000)
    env.join(member_id=follower, instance="i2", protocols=(("range", b"more"),))
    env.advance(30)  # i1 never rejoined: static, so it stays
    (summary,) = env.coordinator.describe_groups(["g"])
    assert summary.state == "CompletingRebalance" and len(summary.members) == 2


def test_static_restart_during_completing_rebalance_rebalances(env):
    leader, follower = static_group(env)
    env.join(member_id=leader, instance="i1")
    env.join(member_id=follower, instance="i2")
    assert state(env) == "CompletingRebalance"
    waiting = env.sync("g", 2, follower, instance="i2")
    assert env.join(instance="i2") == []
    assert waiting[0].error == e.FencedInstanceIdError.errno
    assert state(env) == "PreparingRebalance"


def test_group_state_names_are_kafkas():
    assert [s.value for s in GroupState] == [
        "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]


def test_a_known_member_with_protocols_nobody_else_has(env):
    (leader, _), (follower, _) = env.stable_group(count=2)
    (answer,) = env.join(member_id=follower, protocols=(("sticky", b"s"),))
    assert (answer.error, answer.member_id) == (e.InconsistentGroupProtocolError.errno,
                                                follower)
    assert state(env) == "Stable"


def test_group_max_size_lowered_below_a_loaded_group():
    big = Env()
    (a, _), (b, _), (c, _) = big.stable_group(count=3)
    env = Env(load=False, group_max_size=2)
    env.store = big.store
    env.coordinator = env.new_coordinator()
    partition = env.coordinator.partition_of("g")
    env.coordinator.load(partition, big.store.log(partition), env.now)
    assert state(env) == "PreparingRebalance"  # over capacity: everyone rejoins
    assert env.join(member_id=a) == []
    assert env.join(member_id=b) == []
    (refused,) = env.join(member_id=c)  # two are waiting already: c is dropped
    assert refused.error == e.GroupMaxSizeReachedError.errno
    assert state(env) == "CompletingRebalance"
    (summary,) = env.coordinator.describe_groups(["g"])
    assert [m.member_id for m in summary.members] == [a, b]


def test_static_restart_answered_by_a_rebalance_when_one_starts_meanwhile(env):
    leader, follower = static_group(env)
    env.store.hold = True
    parked = env.join(instance="i2")  # its new id is being stored
    env.join(member_id=leader, instance="i1", protocols=(("range", b"new"),))
    assert state(env) == "CompletingRebalance"  # both are parked in a join: done at once
    assert parked[0].generation == 2
    env.store.release(0)
    assert len(parked) == 1  # the store's answer came too late to matter


def test_rebalance_waits_while_no_member_rejoins(env, caplog):
    joined = env.join(instance="i1", session_ms=40_000, rebalance_ms=10_000)
    env.complete_initial_delay(joined)
    static = joined[0].member_id
    dynamic, parked = env.new_member(session_ms=40_000, rebalance_ms=10_000)
    env.join(member_id=static, instance="i1", session_ms=40_000, rebalance_ms=10_000)
    env.sync("g", 2, static, {static: b"s", dynamic: b"d"}, instance="i1")
    env.sync("g", 2, dynamic)
    assert state(env) == "Stable"
    env.coordinator.leave_group(env.now, "g", [(dynamic, None)])
    env.advance(10)  # the rebalance timeout: the static member did not rejoin
    assert "no member rejoined" in caplog.text
    assert state(env) == "PreparingRebalance"
    env.advance(31)  # its session ends: removed, nobody is left
    assert state(env) == "Empty"


def test_a_pending_member_over_the_max_size_is_dropped():
    env = Env(group_max_size=2)
    (a, _), (b, _) = env.stable_group(count=2)
    parked_a = env.join(member_id=a, protocols=(("range", b"new"),))  # 1 waiting
    (pending,) = env.join()  # accepted: 1 < 2
    assert pending.error == e.MemberIdRequiredError.errno
    parked_b = env.join(member_id=b)  # 2 waiting; the pending member holds the rebalance
    assert (parked_a, parked_b) == ([], [])
    (refused,) = env.join(member_id=pending.member_id)
    assert refused.error == e.GroupMaxSizeReachedError.errno
    assert parked_a[0].generation == parked_b[0].generation == 2


def test_a_join_superseded_by_the_same_member_is_answered(env):
    (leader, _), (follower, _) = env.stable_group(count=2)
    first = env.join(member_id=leader, protocols=(("range", b"new"),))
    second = env.join(member_id=leader, protocols=(("range", b"new"),))
    assert (first[0].error, second) == (e.RebalanceInProgressError.errno, [])
    env.join(member_id=follower)
    assert second[0].generation == 2
    first_sync = env.sync("g", 2, follower)
    second_sync = env.sync("g", 2, follower)
    assert (first_sync[0].error, second_sync) == (e.RebalanceInProgressError.errno, [])
