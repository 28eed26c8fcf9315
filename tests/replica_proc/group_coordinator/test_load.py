"""Partition ownership: replaying ``__consumer_offsets`` rebuilds groups and offsets (
committed offsets survive a coordinator failover), unloading answers every parked request
NOT_COORDINATOR; DescribeGroups and ListGroups."""
from __future__ import annotations

import logging

import pytest

from cluster import errors as e
from replica_proc.group_coordinator import records
from replica_proc.group_coordinator.results import CommittedOffset
from tests.replica_proc.group_coordinator.env import Env

T0P0 = ("t0", 0)


def reload(env, partition, now=None):
    """A new coordinator that loads ``partition`` from what ``env``'s wrote."""
    coordinator = env.new_coordinator()
    coordinator.begin_load(partition)
    coordinator.load(partition, env.store.log(partition), env.now if now is None else now)
    return coordinator


def test_replay_restores_a_stable_group_and_its_offsets(env):
    (leader, _), (follower, _) = env.stable_group(count=2)
    env.commit("g", {T0P0: (42, 7, "m")}, 1, leader)
    partition = env.coordinator.partition_of("g")
    env.coordinator.unload(partition)
    assert env.heartbeat("g", 1, leader) == e.NotCoordinatorError.errno
    env.coordinator = reload(env, partition)
    assert env.coordinator.fetch_offsets("g")[1] == {T0P0: CommittedOffset(42, 7, "m")}
    (summary,) = env.coordinator.describe_groups(["g"])
    assert (summary.state, summary.protocol) == ("Stable", "range")
    assert [(m.member_id, m.assignment) for m in summary.members] == [
        (leader, f"assignment-{leader}".encode()), (follower, f"assignment-{follower}".encode())]
    assert env.heartbeat("g", 1, leader) == 0
    (again,) = env.join(member_id=follower)  # same metadata: the generation as it is
    assert (again.generation, again.leader) == (1, leader)
    env.advance(5)
    assert env.heartbeat("g", 1, leader) == 0
    env.advance(5)  # sessions restarted at the load; the follower fell silent
    assert env.heartbeat("g", 1, leader) == e.RebalanceInProgressError.errno


def test_replay_last_record_wins_tombstones_delete(env):
    env.commit("g", {T0P0: (1, -1, ""), ("t0", 1): (2, -1, "")})
    env.commit("g", {T0P0: (3, -1, "")})
    env.commit("h", {T0P0: (9, -1, "")})
    env.coordinator.delete_offsets("g", [("t0", 1)], lambda *a: None)
    env.coordinator.delete_groups(["h"], lambda a: None)
    for partition in {env.coordinator.partition_of(g) for g in "gh"}:
        coordinator = reload(env, partition)
        for group, offsets in {"g": {T0P0: 3}, "h": {}}.items():
            if coordinator.partition_of(group) == partition:
                assert {tp: o.offset for tp, o in coordinator.fetch_offsets(group)[1].items()} \
                    == offsets
                assert coordinator.describe_groups([group])[0].state == (
                    "Empty" if offsets else "Dead")


def test_replay_of_an_empty_group_after_its_members_left(env):
    ((member, _),) = env.stable_group()
    env.coordinator.leave_group(env.now, "g", [(member, None)])
    coordinator = reload(env, env.coordinator.partition_of("g"))
    (summary,) = coordinator.describe_groups(["g"])
    assert (summary.state, summary.protocol_type, summary.members) == ("Empty", "consumer", ())
    env.coordinator = coordinator
    parked = env.join(require_known=False)
    env.advance(3)
    assert parked[0].generation == 3  # generation 2 was the empty one


def test_a_record_that_does_not_decode_is_skipped(env, caplog):
    env.commit("g", {T0P0: (5, -1, "")})
    partition = env.coordinator.partition_of("g")
    bad_key = b"\x00\x07junk"
    good_key = records.encode_key(records.OffsetCommitKey("g", "t0", 1))
    stored = [(bad_key, b""), (good_key, b"\x00\x03trunc"), *env.store.log(partition)]
    coordinator = env.new_coordinator()
    with caplog.at_level(logging.ERROR):
        coordinator.load(partition, stored, env.now)
    assert coordinator.fetch_offsets("g")[1] == {T0P0: CommittedOffset(5, -1, "")}
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [f"record {i} skipped" in r.getMessage() for i, r in enumerate(errors)] == [
        True, True]


def test_loading_twice_is_refused(env):
    with pytest.raises(ValueError, match="partition 0 is already loaded"):
        env.coordinator.load(0, [], env.now)
    with pytest.raises(ValueError, match="partition 0 is already loaded"):
        env.coordinator.begin_load(0)


def test_unload_answers_parked_requests_not_coordinator(env):
    (leader, _), (follower, _) = env.stable_group(count=2)
    parked_join = env.join(member_id=leader, protocols=(("range", b"new"),))
    env.commit("h", {("t1", 0): (1, -1, "")})
    env.store.hold = True
    parked_commit = env.commit("h", {T0P0: (1, -1, "")})
    parked_deletion = []
    env.coordinator.delete_offsets("h", [("t1", 0)], lambda *a: parked_deletion.append(a))
    env.coordinator.unload(env.coordinator.partition_of("g"))
    env.coordinator.unload(env.coordinator.partition_of("h"))
    assert parked_join[0].error == e.NotCoordinatorError.errno
    assert parked_commit == [{T0P0: e.NotCoordinatorError.errno}]
    assert parked_deletion == [(e.NotCoordinatorError.errno, {})]
    env.store.release(0)  # the late store answers change nothing
    assert (len(parked_commit), len(parked_deletion)) == (1, 1)
    assert env.coordinator.next_deadline() is not None  # the retention check only
    assert env.coordinator.error_for("g") == e.NotCoordinatorError.errno


def test_unload_answers_parked_syncs(env):
    (leader, parked), (follower, _) = [env.new_member() for _ in range(2)]
    env.complete_initial_delay(parked)
    env.store.hold = True
    follower_sync = env.sync("g", 1, follower)
    leader_sync = env.sync("g", 1, leader, {leader: b"L"})
    env.coordinator.unload(env.coordinator.partition_of("g"))
    assert [follower_sync[0].error, leader_sync[0].error] == [e.NotCoordinatorError.errno] * 2
    env.store.release(0)
    assert len(leader_sync) == 1


def test_describe_groups(env):
    (leader, _), (follower, _) = env.stable_group(count=2)
    stable, unknown, invalid = env.coordinator.describe_groups(["g", "nobody", None])
    assert (stable.state, stable.protocol_type, stable.protocol) == ("Stable", "consumer",
                                                                      "range")
    assert [(m.member_id, m.client_id, m.client_host, m.metadata) for m in stable.members] == [
        (leader, "client", "/127.0.0.1", b"range-metadata"),
        (follower, "client", "/127.0.0.1", b"range-metadata")]
    assert (unknown.error, unknown.state, unknown.members) == (0, "Dead", ())
    (unknown,) = env.coordinator.describe_groups(["nobody"], version=6)
    assert (unknown.error, unknown.state) == (e.GroupIdNotFoundError.errno, "Dead")
    assert invalid.error == e.InvalidGroupIdError.errno
    env.join(member_id=leader)
    (preparing,) = env.coordinator.describe_groups(["g"])
    assert preparing.protocol == "" and {m.metadata for m in preparing.members} == {b""}
    assert Env(load=False).coordinator.describe_groups(["g"])[0].error == \
        e.NotCoordinatorError.errno


def test_list_groups(env):
    env.stable_group("a")
    env.commit("b", {T0P0: (1, -1, "")})
    error, groups = env.coordinator.list_groups()
    assert error == 0
    assert sorted((g.group_id, g.protocol_type, g.state) for g in groups) == [
        ("a", "consumer", "Stable"), ("b", "", "Empty")]
    assert [g.group_id for g in env.coordinator.list_groups(["empty"])[1]] == ["b"]
    coordinator = Env(load=False).coordinator
    coordinator.begin_load(1)
    assert coordinator.list_groups() == (e.CoordinatorLoadInProgressError.errno, [])


def test_replay_of_a_deleted_group(env):
    ((member, _),) = env.stable_group()
    env.coordinator.leave_group(env.now, "g", [(member, None)])
    env.coordinator.delete_groups(["g"], lambda a: None)
    coordinator = reload(env, env.coordinator.partition_of("g"))
    assert coordinator.describe_groups(["g"])[0].state == "Dead"
    assert coordinator.list_groups() == (0, [])
