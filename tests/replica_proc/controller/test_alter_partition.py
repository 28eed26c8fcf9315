"""The controller's AlterPartition: a leader's ISR changes, their checks and their epochs."""
from __future__ import annotations

import pytest

from cluster.errors import NotControllerError
from cluster.metadata import data_dir as dd
from replica_proc.controller.controller import IsrChange

UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
FENCED_LEADER_EPOCH = 74
INVALID_UPDATE_VERSION = 95
INELIGIBLE_REPLICA = 107


@pytest.fixture
def rf3(env):
    """Three live brokers, broker 0's controller, topic t (2 partitions, RF 3) whose
    partition 0 has the ISR {leader}."""
    for b in range(3):
        env.start_broker(b)
    controller = env.controller(0)
    env.poll(controller)
    assert controller.create_topics([{"name": "t", "num_partitions": 2,
                                      "replication_factor": 3}]) == {"t": (0, None)}
    state = controller.image.partition("t", 0)
    code, state = controller.alter_partition(state.leader, [change(state, (state.leader,))])[
        ("t", 0)]
    assert code == 0 and state.isr == (state.leader,)
    return env, controller


def change(state, isr, **fields):
    values = {"topic": state.topic, "partition": state.partition,
              "leader_epoch": state.leader_epoch, "partition_epoch": state.partition_epoch,
              "new_isr": tuple(isr), **fields}
    return IsrChange(**values)


def test_an_expansion_is_committed_published_and_bumps_the_partition_epoch(rf3):
    env, controller = rf3
    state = controller.image.partition("t", 0)
    version = controller.image.version
    results = controller.alter_partition(state.leader, [change(state, state.replicas)])
    code, new = results[("t", 0)]
    assert code == 0
    assert (new.leader, new.leader_epoch, new.isr, new.partition_epoch) == (
        state.leader, state.leader_epoch, state.replicas, state.partition_epoch + 1)
    image = env.page.read()
    assert image.partition("t", 0) == new and image.version == version + 1
    # a new controller replays the change from the log
    controller.close()
    successor = env.controller(1)
    assert env.poll(successor).partition("t", 0) == new


def test_the_same_isr_changes_nothing(rf3):
    env, controller = rf3
    state = controller.image.partition("t", 0)
    version = controller.image.version
    assert controller.alter_partition(state.leader, [change(state, state.isr)]) == {
        ("t", 0): (0, state)}
    assert env.page.read().version == version


def test_changes_are_checked_in_order_and_a_repeat_is_stale(rf3):
    env, controller = rf3
    first = controller.image.partition("t", 0)
    version = controller.image.version
    results = controller.alter_partition(first.leader, [
        change(first, first.replicas), change(first, first.replicas[:2])])
    assert results[("t", 0)] == (INVALID_UPDATE_VERSION, None)  # the second saw the first
    assert env.page.read().partition("t", 0).isr == first.replicas
    assert env.page.read().version == version + 1


@pytest.mark.parametrize("make, code", [
    (lambda s: change(s, s.isr, topic="nope"), UNKNOWN_TOPIC_OR_PARTITION),
    (lambda s: change(s, s.isr, partition=9), UNKNOWN_TOPIC_OR_PARTITION),
    (lambda s: change(s, s.replicas, leader_epoch=s.leader_epoch - 1), FENCED_LEADER_EPOCH),
    (lambda s: change(s, s.replicas, leader_epoch=s.leader_epoch + 1), FENCED_LEADER_EPOCH),
    (lambda s: change(s, s.replicas, partition_epoch=s.partition_epoch - 1),
     INVALID_UPDATE_VERSION),
    (lambda s: change(s, [b for b in s.replicas if b != s.leader]), INELIGIBLE_REPLICA),
    (lambda s: change(s, s.isr + (7,)), INELIGIBLE_REPLICA),
    (lambda s: change(s, s.isr + s.isr), INELIGIBLE_REPLICA),
], ids=["unknown-topic", "unknown-partition", "old-leader-epoch", "future-leader-epoch",
        "old-partition-epoch", "isr-without-leader", "not-a-replica", "duplicate"])
def test_refused_changes_name_kafkas_error_and_change_nothing(rf3, make, code):
    env, controller = rf3
    state = controller.image.partition("t", 0)
    before = env.page.read()
    bad = make(state)
    assert controller.alter_partition(state.leader, [bad]) == {
        (bad.topic, bad.partition): (code, None)}
    assert env.page.read() == before


def test_only_the_leader_may_change_the_isr(rf3):
    _, controller = rf3
    state = controller.image.partition("t", 0)
    follower = next(b for b in state.replicas if b != state.leader)
    assert controller.alter_partition(follower, [change(state, state.replicas)]) == {
        ("t", 0): (NOT_LEADER_OR_FOLLOWER, None)}


@pytest.mark.parametrize("how", ["stopped", "stopping"])
def test_a_broker_that_is_not_alive_cannot_join(rf3, how):
    env, controller = rf3
    state = controller.image.partition("t", 0)
    follower = next(b for b in state.replicas if b != state.leader)
    if how == "stopped":
        env.stop_broker(follower)
    else:
        env.brokers[follower].set_state(dd.STATE_STOPPING)
    env.poll(controller)
    assert not controller.image.brokers[follower].alive
    state = controller.image.partition("t", 0)
    assert controller.alter_partition(state.leader, [
        change(state, state.isr + (follower,))]) == {("t", 0): (INELIGIBLE_REPLICA, None)}


def test_a_controller_change_of_the_isr_fences_the_leaders_next_request(rf3):
    """The controller drops a dead follower from the ISR (partition epoch + 1); a leader
    request built on the state before is stale."""
    env, controller = rf3
    state = controller.image.partition("t", 0)
    code, state = controller.alter_partition(state.leader, [change(state, state.replicas)])[
        ("t", 0)]
    follower = next(b for b in state.replicas if b != state.leader)
    env.stop_broker(follower)
    shrunk = env.poll(controller).partition("t", 0)
    assert follower not in shrunk.isr
    assert shrunk.partition_epoch == state.partition_epoch + 1
    assert controller.alter_partition(state.leader, [change(state, state.replicas)]) == {
        ("t", 0): (INVALID_UPDATE_VERSION, None)}


def test_only_the_active_controller_answers(env):
    env.start_broker(0)
    env.start_broker(1)
    active, other = env.controller(0), env.controller(1)
    env.poll(active)
    env.poll(other)
    with pytest.raises(NotControllerError):
        other.alter_partition(1, [])
