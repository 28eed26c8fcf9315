"""TxnOffsetCommit: offsets stored in a producer's transaction are pending — invisible to
OffsetFetch (UNSTABLE_OFFSET_COMMIT with require_stable) — until the producer's COMMIT
marker makes them the group's committed offsets, except where a plain OffsetCommit's
record came after the transaction's (Kafka keeps the later); an ABORT drops them;
replaying ``__consumer_offsets`` does the same with the transactions' records and
markers."""
from __future__ import annotations

from cluster import errors as e
from replica_proc.group_coordinator.results import CommittedOffset
from segments.record.control_record import ABORT, COMMIT

T0P0 = ("t0", 0)
T0P1 = ("t0", 1)


def offsets_of(coordinator, group):
    return {tp: o.offset for tp, o in coordinator.fetch_offsets(group)[1].items()}


def test_the_offsets_are_stored_transactionally_and_pending_until_the_commit(env):
    assert env.commit("g", {T0P0: (1, -1, "")}) == [{T0P0: 0}]
    assert env.txn_commit("g", {T0P0: (5, -1, "m"), T0P1: (6, -1, "")}, 7, 3) == [
        {T0P0: 0, T0P1: 0}]
    assert env.store.producers[-1] == (7, 3)  # the producer's transactional batch
    assert offsets_of(env.coordinator, "g") == {T0P0: 1}
    assert env.coordinator.fetch_offsets("g", [T0P0, T0P1], require_stable=True)[1] == {
        T0P0: CommittedOffset(error=e.UnstableOffsetCommitError.errno),
        T0P1: CommittedOffset(error=e.UnstableOffsetCommitError.errno)}
    partition = env.coordinator.partition_of("g")
    env.coordinator.complete_transaction(partition, 8, True)  # another producer's
    assert offsets_of(env.coordinator, "g") == {T0P0: 1}
    env.coordinator.complete_transaction(partition, 7, True)
    assert env.coordinator.fetch_offsets("g", [T0P0, T0P1], require_stable=True)[1] == {
        T0P0: CommittedOffset(5, -1, "m"), T0P1: CommittedOffset(6, -1, "")}


def test_an_abort_drops_the_pending_offsets(env):
    env.commit("g", {T0P0: (1, -1, "")})
    env.txn_commit("g", {T0P0: (5, -1, "")})
    env.coordinator.complete_transaction(env.coordinator.partition_of("g"), 7, False)
    assert offsets_of(env.coordinator, "g") == {T0P0: 1}
    assert env.coordinator.fetch_offsets("g", [T0P0], require_stable=True)[1] == {
        T0P0: CommittedOffset(1, -1, "")}


def test_a_marker_on_another_partition_completes_nothing(env):
    env.txn_commit("g", {T0P0: (5, -1, "")})
    partition = env.coordinator.partition_of("g")
    env.coordinator.complete_transaction(partition + 1, 7, True)
    assert offsets_of(env.coordinator, "g") == {}


def test_a_failed_write_leaves_nothing_pending(env):
    env.store.error = e.NotEnoughReplicasError.errno
    assert env.txn_commit("g", {T0P0: (5, -1, "")}) == [
        {T0P0: e.CoordinatorNotAvailableError.errno}]
    env.store.error = 0
    env.coordinator.complete_transaction(env.coordinator.partition_of("g"), 7, True)
    assert offsets_of(env.coordinator, "g") == {}


def test_the_group_is_checked_as_kafka_does(env):
    assert env.txn_commit("", {T0P0: (5, -1, "")}) == [{T0P0: e.InvalidGroupIdError.errno}]
    partition = env.coordinator.partition_of("g")
    env.coordinator.unload(partition)
    assert env.txn_commit("g", {T0P0: (5, -1, "")}) == [{T0P0: e.NotCoordinatorError.errno}]
    env.coordinator.begin_load(partition)
    assert env.txn_commit("g", {T0P0: (5, -1, "")}) == [
        {T0P0: e.CoordinatorLoadInProgressError.errno}]


def test_an_active_group_takes_transactional_offsets_without_member_checks(env):
    env.stable_group(count=1)  # v0-2 carry no generation or member id
    assert env.txn_commit("g", {T0P0: (5, -1, "")}) == [{T0P0: 0}]


def reload(env, partition):
    coordinator = env.new_coordinator()
    coordinator.begin_load(partition)
    coordinator.load(partition, env.store.log(partition), env.now)
    return coordinator


def test_replay_commits_committed_transactions_drops_aborted_keeps_open_ones_pending(env):
    partition = env.coordinator.partition_of("g")
    env.commit("g", {T0P0: (1, -1, "")})
    env.txn_commit("g", {T0P0: (5, -1, "")}, producer_id=7)
    env.txn_commit("g", {T0P1: (6, -1, "")}, producer_id=8)
    env.store.marker(partition, 7, COMMIT)
    env.store.marker(partition, 8, ABORT)
    env.txn_commit("g", {T0P1: (9, -1, "")}, producer_id=8)  # a new transaction, open
    coordinator = reload(env, partition)
    assert offsets_of(coordinator, "g") == {T0P0: 5}
    assert coordinator.fetch_offsets("g", [T0P1], require_stable=True)[1] == {
        T0P1: CommittedOffset(error=e.UnstableOffsetCommitError.errno)}
    coordinator.complete_transaction(partition, 8, True)
    assert offsets_of(coordinator, "g") == {T0P0: 5, T0P1: 9}


def test_replay_of_a_group_known_only_by_an_open_transaction(env):
    partition = env.coordinator.partition_of("g")
    env.txn_commit("g", {T0P0: (5, -1, "")})
    coordinator = reload(env, partition)
    assert coordinator.describe_groups(["g"])[0].state == "Empty"
    assert offsets_of(coordinator, "g") == {}
    coordinator.complete_transaction(partition, 7, True)
    assert offsets_of(coordinator, "g") == {T0P0: 5}


def test_deleting_the_group_forgets_its_pending_transactional_offsets(env):
    env.txn_commit("g", {T0P0: (5, -1, "")})
    answers = []
    env.coordinator.delete_groups(["g"], answers.append)
    assert answers == [{"g": 0}]
    assert env.coordinator.describe_groups(["g"])[0].state == "Dead"
    env.coordinator.complete_transaction(env.coordinator.partition_of("g"), 7, True)
    assert offsets_of(env.coordinator, "g") == {}


def test_deleting_an_offset_forgets_it_in_pending_transactions(env):
    env.commit("g", {T0P0: (1, -1, ""), T0P1: (2, -1, "")})
    env.txn_commit("g", {T0P0: (5, -1, ""), T0P1: (6, -1, "")})
    env.coordinator.delete_offsets("g", [T0P0], lambda *answer: None)
    env.coordinator.complete_transaction(env.coordinator.partition_of("g"), 7, True)
    assert offsets_of(env.coordinator, "g") == {T0P1: 6}


def test_a_plain_commit_written_after_the_transactions_record_wins_its_commit(env):
    env.commit("g", {T0P0: (1, -1, ""), T0P1: (2, -1, "")})
    env.txn_commit("g", {T0P0: (5, -1, ""), T0P1: (6, -1, "")})
    env.commit("g", {T0P0: (8, -1, "later")})  # after the TxnOffsetCommit's record
    env.coordinator.complete_transaction(env.coordinator.partition_of("g"), 7, True)
    assert env.coordinator.fetch_offsets("g", [T0P0, T0P1], require_stable=True)[1] == {
        T0P0: CommittedOffset(8, -1, "later"), T0P1: CommittedOffset(6, -1, "")}


def test_a_plain_commit_acknowledged_after_the_marker_still_wins(env):
    env.txn_commit("g", {T0P0: (5, -1, "")})
    env.store.hold = True
    answers = env.commit("g", {T0P0: (8, -1, "")})
    assert answers == []  # written, not yet acknowledged
    env.coordinator.complete_transaction(env.coordinator.partition_of("g"), 7, True)
    assert offsets_of(env.coordinator, "g") == {T0P0: 5}
    env.store.release()
    assert answers == [{T0P0: 0}] and offsets_of(env.coordinator, "g") == {T0P0: 8}


def test_a_transactions_record_written_after_a_plain_commit_wins_its_commit(env):
    env.txn_commit("g", {T0P0: (5, -1, "")}, producer_id=7)
    env.commit("g", {T0P0: (8, -1, "")})
    env.txn_commit("g", {T0P1: (9, -1, "")}, producer_id=8)
    env.commit("g", {T0P1: (3, -1, "")})
    env.txn_commit("g", {T0P1: (10, -1, "")}, producer_id=8)  # after the plain 3
    partition = env.coordinator.partition_of("g")
    env.coordinator.complete_transaction(partition, 7, True)
    env.coordinator.complete_transaction(partition, 8, True)
    assert offsets_of(env.coordinator, "g") == {T0P0: 8, T0P1: 10}


def test_replay_keeps_a_plain_commit_written_after_the_transactions_record(env):
    partition = env.coordinator.partition_of("g")
    env.txn_commit("g", {T0P0: (5, -1, ""), T0P1: (6, -1, "")}, producer_id=7)
    env.commit("g", {T0P0: (8, -1, "")})
    env.store.marker(partition, 7, COMMIT)
    coordinator = reload(env, partition)
    assert offsets_of(coordinator, "g") == {T0P0: 8, T0P1: 6}
    # after the reload, a transaction written now is later than everything loaded
    coordinator.commit_transactional_offsets(env.now, "g", 9, 0, {T0P0: (11, -1, "")},
                                             lambda answer: None)
    coordinator.complete_transaction(partition, 9, True)
    assert offsets_of(coordinator, "g") == {T0P0: 11, T0P1: 6}


# -- KIP-447: v3's group metadata ------------------------------------------------------------

def stable_offsets(env, partitions=(T0P0,)):
    return env.coordinator.fetch_offsets("g", list(partitions), require_stable=True)[1]


def test_a_current_member_commits_transactionally(env):
    ((member, _),) = env.stable_group()
    assert env.txn_commit("g", {T0P0: (5, -1, "")}, generation=1, member_id=member) == [
        {T0P0: 0}]
    assert stable_offsets(env) == {T0P0: CommittedOffset(
        error=e.UnstableOffsetCommitError.errno)}
    env.coordinator.complete_transaction(env.coordinator.partition_of("g"), 7, True)
    assert stable_offsets(env) == {T0P0: CommittedOffset(5, -1, "")}


def test_a_member_of_an_older_generation_is_illegal_generation(env):
    (leader, _), (follower, _) = env.stable_group(count=2)
    env.commit("g", {T0P0: (1, -1, "")}, 1, leader)
    rejoined = env.join(member_id=leader)  # parked until the follower rejoins too
    assert rejoined == []
    env.join(member_id=follower)
    assert rejoined[0].generation == 2
    writes = len(env.store.writes)
    assert env.txn_commit("g", {T0P0: (5, -1, "")}, generation=1, member_id=follower) == [
        {T0P0: e.IllegalGenerationError.errno}]
    assert env.txn_commit("g", {T0P0: (5, -1, "")}, generation=-1, member_id=follower) == [
        {T0P0: e.IllegalGenerationError.errno}]
    assert len(env.store.writes) == writes  # nothing stored, nothing pending
    assert stable_offsets(env) == {T0P0: CommittedOffset(1, -1, "")}
    # CompletingRebalance: the new generation's members commit (Kafka has no
    # REBALANCE_IN_PROGRESS for a transactional commit)
    assert env.txn_commit("g", {T0P0: (5, -1, "")}, generation=2, member_id=follower) == [
        {T0P0: 0}]


def test_a_member_removed_by_its_session_timeout_is_unknown(env):
    """The zombie of KIP-447: paused past its session, its partitions given to others."""
    (leader, _), (zombie, _) = env.stable_group(count=2)
    for _ in range(4):
        env.advance(3)
        env.heartbeat("g", 1, leader)
    assert env.txn_commit("g", {T0P0: (5, -1, "")}, generation=1, member_id=zombie) == [
        {T0P0: e.UnknownMemberIdError.errno}]
    assert env.txn_commit("other", {T0P0: (5, -1, "")}, generation=1, member_id=zombie) == [
        {T0P0: e.UnknownMemberIdError.errno}]  # a group it never was in (created Empty)
    assert stable_offsets(env) == {T0P0: CommittedOffset()}


def test_a_fenced_static_member_is_fenced_instance_id(env):
    first = env.join(instance="i1")
    env.complete_initial_delay(first)
    old = first[0].member_id
    env.sync("g", 1, old, {old: b"a"}, instance="i1")
    (replacement,) = env.join(instance="i1")  # the same instance id, a new member id
    assert env.txn_commit("g", {T0P0: (5, -1, "")}, generation=1, member_id=old,
                          instance="i1") == [{T0P0: e.FencedInstanceIdError.errno}]
    assert env.txn_commit("g", {T0P0: (5, -1, "")}, generation=1, member_id=old,
                          instance="i2") == [{T0P0: e.UnknownMemberIdError.errno}]
    assert env.txn_commit("g", {T0P0: (5, -1, "")}, generation=1,
                          member_id=replacement.member_id, instance="i1") == [{T0P0: 0}]


def test_only_stable_fetches_see_the_pending_transaction(env):
    env.commit("g", {T0P0: (1, -1, ""), T0P1: (2, -1, "")})
    env.txn_commit("g", {T0P0: (5, -1, "")})
    assert env.coordinator.fetch_offsets("g", [T0P0, T0P1])[1] == {
        T0P0: CommittedOffset(1, -1, ""), T0P1: CommittedOffset(2, -1, "")}
    assert stable_offsets(env, (T0P0, T0P1)) == {
        T0P0: CommittedOffset(error=e.UnstableOffsetCommitError.errno),
        T0P1: CommittedOffset(2, -1, "")}
