"""OffsetCommit and OffsetFetch (Kafka's handleCommitOffsets), OffsetDelete, DeleteGroups and the
offsets retention: every error, commits visible only once stored, tombstones written."""
from __future__ import annotations

import pytest

from cluster import errors as e
from cluster.protocol.consumer_protocol import encode_subscription
from replica_proc.group_coordinator import records
from replica_proc.group_coordinator.results import CommittedOffset
from tests.replica_proc.group_coordinator.env import Env

T0P0, T0P1, T1P0 = ("t0", 0), ("t0", 1), ("t1", 0)
MINUTE = 60


def fetch(env, group="g", partitions=None, require_stable=False):
    error, offsets = env.coordinator.fetch_offsets(group, partitions, require_stable)
    assert error == 0
    return offsets


def state(env, group="g"):
    (summary,) = env.coordinator.describe_groups([group])
    return summary.state


def written(env):
    """The records of the last write, decoded: [(key, value or None)]."""
    _, pairs = env.store.writes[-1]
    out = []
    for key, value in pairs:
        key = records.decode_key(key)
        out.append((key, records.decode_value(key, value)))
    return out


def test_commit_without_generation_to_an_empty_group_ignores_the_member_id(env):
    env.commit("g", {T0P0: (1, -1, "")})
    assert env.commit("g", {T0P0: (2, -1, "")}, -1, "anyone", "any-instance") == [{T0P0: 0}]


def test_commit_without_generation_creates_an_empty_group(env):
    assert env.commit("g", {T0P0: (5, 3, "meta"), T0P1: (7, -1, None)}) == [
        {T0P0: 0, T0P1: 0}]
    assert fetch(env) == {T0P0: CommittedOffset(5, 3, "meta"), T0P1: CommittedOffset(7, -1, "")}
    assert state(env) == "Empty"
    (key, value), _ = written(env)
    assert key == records.OffsetCommitKey("g", "t0", 0)
    assert (value.offset, value.leader_epoch, value.metadata, value.commit_timestamp) == (
        5, 3, "meta", env.wall.now)


def test_fetch_of_unknown_partitions_and_groups(env):
    env.commit("g", {T0P0: (5, -1, "")})
    assert fetch(env, partitions=[T0P0, T1P0]) == {T0P0: CommittedOffset(5, -1, ""),
                                                   T1P0: CommittedOffset()}
    assert fetch(env, "nobody", [T0P0]) == {T0P0: CommittedOffset(-1, -1, "")}
    assert fetch(env, "nobody") == {}
    assert Env(load=False).coordinator.fetch_offsets("g", None) == (
        e.NotCoordinatorError.errno, {})


def test_a_commit_is_visible_only_once_stored(env):
    env.commit("g", {T0P0: (1, -1, "")})
    env.store.hold = True
    answers = env.commit("g", {T0P0: (2, -1, "")})
    assert answers == []
    assert fetch(env)[T0P0].offset == 1
    assert fetch(env, require_stable=True)[T0P0] == CommittedOffset(
        error=e.UnstableOffsetCommitError.errno)
    env.store.release(0)
    assert answers == [{T0P0: 0}]
    assert fetch(env, require_stable=True)[T0P0].offset == 2


def test_commit_errors_without_a_group(env):
    assert env.commit("g", {T0P0: (1, -1, "")}, generation=1, member_id="m") == [
        {T0P0: e.IllegalGenerationError.errno}]
    assert Env(load=False).commit("g", {T0P0: (1, -1, "")}) == [
        {T0P0: e.NotCoordinatorError.errno}]


def test_commit_errors_of_an_active_group(env):
    (member, _), (other, _) = env.stable_group(count=2)
    offsets = {T0P0: (1, -1, "")}
    assert env.commit("g", offsets, 1, member) == [{T0P0: 0}]
    # Generation -1 to an active group: only members may commit (Kafka 3.7+'s answer).
    assert env.commit("g", offsets) == [{T0P0: e.UnknownMemberIdError.errno}]
    assert env.commit("g", offsets, 0, member) == [{T0P0: e.IllegalGenerationError.errno}]
    assert env.commit("g", offsets, 1, "client-x") == [{T0P0: e.UnknownMemberIdError.errno}]
    env.join(member_id=member, protocols=(("range", b"new"),))  # PreparingRebalance
    assert env.commit("g", offsets, 1, member) == [{T0P0: 0}]  # still allowed
    env.join(member_id=other)
    assert state(env) == "CompletingRebalance"
    assert env.commit("g", offsets, 2, member) == [{T0P0: e.RebalanceInProgressError.errno}]


def test_commit_of_a_fenced_static_member():
    env = Env()
    first = env.join(instance="i1")
    env.complete_initial_delay(first)
    old = first[0].member_id
    env.sync("g", 1, old, {old: b"a"}, instance="i1")
    env.join(instance="i1")
    assert env.commit("g", {T0P0: (1, -1, "")}, 1, old, "i1") == [
        {T0P0: e.FencedInstanceIdError.errno}]


def test_offset_metadata_too_large_per_partition():
    env = Env(offset_metadata_max_bytes=4)
    writes = len(env.store.writes)
    assert env.commit("g", {T0P0: (1, -1, "12345")}) == [
        {T0P0: e.OffsetMetadataTooLargeError.errno}]
    assert len(env.store.writes) == writes  # nothing to write
    assert env.commit("g", {T0P0: (1, -1, "1234"), T0P1: (2, -1, "\N{GRINNING FACE}" * 3)}) \
        == [{T0P0: 0, T0P1: e.OffsetMetadataTooLargeError.errno}]  # 6 UTF-16 units
    assert fetch(env) == {T0P0: CommittedOffset(1, -1, "1234")}


@pytest.mark.parametrize(("append_error", "answer"), [
    (e.NotEnoughReplicasError, e.CoordinatorNotAvailableError),
    (e.NotLeaderForPartitionError, e.NotCoordinatorError),
    (e.RecordTooLargeError, e.InvalidCommitOffsetSizeError),
    (e.RequestTimedOutError, e.RequestTimedOutError),
])
def test_commit_store_errors(env, append_error, answer):
    env.store.error = append_error.errno
    assert env.commit("g", {T0P0: (1, -1, "")}) == [{T0P0: answer.errno}]
    assert fetch(env) == {}


# -- retention ------------------------------------------------------------------------------

def test_offsets_of_an_empty_group_expire_after_retention():
    env = Env(offsets_retention_minutes=10, offsets_retention_check_interval_ms=60_000)
    ((member, _),) = env.stable_group()
    env.commit("g", {T0P0: (1, -1, "")}, 1, member)
    env.coordinator.leave_group(env.now, "g", [(member, None)])
    assert state(env) == "Empty"
    env.advance(9 * MINUTE)
    assert fetch(env)[T0P0].offset == 1
    env.advance(2 * MINUTE)  # 10 minutes empty, seen by the next check
    assert fetch(env) == {}
    assert state(env) == "Dead"
    assert [(type(k).__name__, v) for k, v in written(env)] == [
        ("OffsetCommitKey", None), ("GroupMetadataKey", None)]


def test_offsets_without_group_management_expire_from_their_commit():
    env = Env(offsets_retention_minutes=10, offsets_retention_check_interval_ms=60_000)
    env.commit("g", {T0P0: (1, -1, "")})
    env.advance(5 * MINUTE)
    env.commit("g", {T0P1: (1, -1, "")})
    env.advance(6 * MINUTE)
    assert set(fetch(env)) == {T0P1}
    env.advance(5 * MINUTE)
    assert fetch(env) == {} and state(env) == "Dead"
    assert written(env) == [(records.OffsetCommitKey("g", "t0", 1), None)]  # no group record


def test_a_stable_consumer_group_keeps_the_offsets_of_its_subscribed_topics():
    env = Env(offsets_retention_minutes=10, offsets_retention_check_interval_ms=60_000)
    subscription = (("range", encode_subscription(["t0"])),)
    ((member, _),) = env.stable_group(protocols=subscription, session_ms=1_800_000)
    env.commit("g", {T0P0: (1, -1, ""), T1P0: (2, -1, "")}, 1, member)
    env.advance(11 * MINUTE)
    assert set(fetch(env)) == {T0P0}


# -- OffsetDelete and DeleteGroups ----------------------------------------------------------

def delete_offsets(env, group, partitions):
    answers = []
    env.coordinator.delete_offsets(group, partitions, lambda *a: answers.append(a))
    return answers


def delete_groups(env, groups):
    answers = []
    env.coordinator.delete_groups(groups, answers.append)
    return answers


def test_delete_offsets_of_an_empty_group(env):
    env.commit("g", {T0P0: (1, -1, ""), T0P1: (2, -1, "")})
    assert delete_offsets(env, "g", [T0P0]) == [(0, {T0P0: 0})]
    assert fetch(env) == {T0P1: CommittedOffset(2, -1, "")}
    assert written(env) == [(records.OffsetCommitKey("g", "t0", 0), None)]


def test_delete_offsets_of_an_active_consumer_group(env):
    subscription = (("range", encode_subscription(["t0"])),)
    ((member, _),) = env.stable_group(protocols=subscription)
    env.commit("g", {T0P0: (1, -1, ""), T1P0: (2, -1, "")}, 1, member)
    assert delete_offsets(env, "g", [T0P0, T1P0]) == [
        (0, {T0P0: e.GroupSubscribedToTopicError.errno, T1P0: 0})]
    assert set(fetch(env)) == {T0P0}


def test_delete_offsets_errors(env):
    assert delete_offsets(env, "nobody", [T0P0]) == [(e.GroupIdNotFoundError.errno, {})]
    assert delete_offsets(env, "", [T0P0]) == [(e.InvalidGroupIdError.errno, {})]
    env.stable_group(protocol_type="connect")
    assert delete_offsets(env, "g", [T0P0]) == [(e.NonEmptyGroupError.errno, {})]


def test_delete_groups(env):
    env.commit("simple", {T0P0: (1, -1, "")})
    ((member, _),) = env.stable_group("active")
    env.stable_group("left")
    (left_member,) = [m.member_id for m in
                      env.coordinator.describe_groups(["left"])[0].members]
    env.coordinator.leave_group(env.now, "left", [(left_member, None)])
    env.store.hold = True
    answers = delete_groups(env, ["simple", "active", "left", "nobody"])
    assert answers == []  # waiting for the tombstones
    env.store.release(0)
    assert answers == [{"active": e.NonEmptyGroupError.errno,
                        "nobody": e.GroupIdNotFoundError.errno, "simple": 0, "left": 0}]
    assert [state(env, g) for g in ("simple", "active", "left")] == [
        "Dead", "Stable", "Dead"]
    tombstones = [(p, [records.decode_key(k) for k, v in pairs if v is None])
                  for p, pairs in env.store.writes[-2:]]
    assert [keys for _, keys in tombstones] == [
        [records.OffsetCommitKey("simple", "t0", 0)],  # generation 0: no group record
        [records.GroupMetadataKey("left")]]
    assert fetch(env, "simple") == {}


def test_delete_groups_store_error(env):
    env.commit("g", {T0P0: (1, -1, "")})
    env.store.error = e.NotLeaderForPartitionError.errno
    assert delete_groups(env, ["g"]) == [{"g": e.NotCoordinatorError.errno}]


def test_delete_groups_answers_at_once_when_nothing_is_eligible(env):
    assert delete_groups(env, ["nobody", ""]) == [
        {"nobody": e.GroupIdNotFoundError.errno, "": e.GroupIdNotFoundError.errno}]


def test_delete_offsets_with_nothing_committed_answers_at_once(env):
    env.stable_group()
    writes = len(env.store.writes)
    # The members' metadata is no consumer subscription: it names no topic.
    assert delete_offsets(env, "g", [T0P0]) == [(0, {T0P0: 0})]
    assert len(env.store.writes) == writes


def test_delete_offsets_during_the_first_rebalance(env):
    env.commit("g", {T0P0: (1, -1, "")})
    env.join(require_known=False, protocols=(("range", encode_subscription(["t0"])),))
    assert state(env) == "PreparingRebalance"  # no protocol chosen yet: no subscription
    assert delete_offsets(env, "g", [T0P0]) == [(0, {T0P0: 0})]


def test_delete_a_group_that_never_stored_anything(env):
    env.join(protocols=[])  # created, then refused
    assert delete_groups(env, ["g"]) == [{"g": 0}]
    assert state(env) == "Dead"


def test_offsets_of_other_protocol_types_do_not_expire():
    env = Env(offsets_retention_minutes=1, offsets_retention_check_interval_ms=60_000)
    ((member, _),) = env.stable_group(protocol_type="connect", session_ms=1_800_000)
    env.commit("g", {T0P0: (1, -1, "")}, 1, member)
    env.advance(5 * MINUTE)
    assert set(fetch(env)) == {T0P0}


def loaded(env, pairs):
    """A coordinator of ``env``'s config that loaded ``pairs`` for group "g"."""
    coordinator = env.new_coordinator()
    coordinator.load(coordinator.partition_of("g"), pairs, env.now)
    return coordinator


def test_expiry_of_old_records_without_state_time_or_with_their_own_expiry():
    env = Env(load=False, offsets_retention_minutes=10,
              offsets_retention_check_interval_ms=60_000)
    group_key = records.encode_key(records.GroupMetadataKey("g"))
    empty = records.encode_value(records.GroupMetadataValue("consumer", 3, None, None))
    commit = records.encode_value(records.OffsetCommitValue(1, "", env.wall.now - 9 * 60_000))
    v1 = b"\x00\x01" + (2).to_bytes(8, "big") + b"\x00\x00" + \
        (env.wall.now).to_bytes(8, "big") + (env.wall.now + 60_000).to_bytes(8, "big")
    env.coordinator = loaded(env, [
        (group_key, empty),
        (records.encode_key(records.OffsetCommitKey("g", "t0", 0)), commit),
        (records.encode_key(records.OffsetCommitKey("g", "t0", 1)), v1)])
    assert set(fetch(env)) == {T0P0, ("t0", 1)}
    env.advance(1 * MINUTE)  # v1's own expiry time; t0-0's commit is 10 minutes old
    assert fetch(env) == {} and state(env) == "Dead"
