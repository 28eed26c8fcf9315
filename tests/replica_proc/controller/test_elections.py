"""ElectLeaders (KIP-460) on the controller, and the automatic leader rebalance
(``auto.leader.rebalance.enable``): who leads afterwards, the epochs, the per-partition
errors, one metadata log batch per call, and Kafka's imbalance rule per preferred broker.

Nothing grows an ISR yet, so a test that needs a follower in the ISR writes the partition
state a controller that grew it would have written (``take_over_with``): the controller is
closed, the state appended to the metadata log, and a controller of the next term replays it.
"""
from __future__ import annotations

import pytest

from cluster.errors import InvalidRequestError, NotControllerError
from cluster.metadata.model import PartitionState
from cluster.protocol.frames import ElectionType
from replica_proc.controller import metadata_log as mr
from replica_proc.controller.controller import IsrChange
from replica_proc.controller.metadata_log import MetadataLog
from replica_proc.controller.placement import elect_preferred, imbalanced_partitions

PREFERRED, UNCLEAN = ElectionType.PREFERRED, ElectionType.UNCLEAN
NONE, UNKNOWN, PREFERRED_NOT_AVAILABLE, ELIGIBLE_NOT_AVAILABLE, NOT_NEEDED = 0, 3, 80, 83, 84


@pytest.fixture
def three(env):
    for b in range(3):
        env.start_broker(b)
    return env


def active(env, broker_id=0, **config):
    controller = env.controller(broker_id, **config)
    env.poll(controller)
    assert controller.active
    return controller


def take_over_with(env, controller, *states, **config):
    """Close ``controller``, append ``states`` to the metadata log and return the next
    term's controller (same broker, ``config``), active."""
    controller.close()
    metadata_log = MetadataLog(env.data_dir)
    try:
        _, epoch = metadata_log.replay(env.cluster_id)
        metadata_log.append([mr.partition_record(state) for state in states], epoch)
    finally:
        metadata_log.close()
    return active(env, controller.broker_id, **config)


def state(image, topic, partition):
    p = image.partition(topic, partition)
    return p.leader, p.leader_epoch, p.isr


def codes(results):
    return {key: code for key, (code, _) in results.items()}


def led_by_a_follower(env, **config):
    """Topic t: p0 replicas [0,1,2] led by 1 (epoch 3), ISR all three; p1 replicas [1,2,0]
    led by its preferred replica 1."""
    controller = active(env, **config)
    controller.create_topics([{"name": "t", "assignments": {0: [0, 1, 2], 1: [1, 2, 0]}}])
    return take_over_with(env, controller,
                          PartitionState("t", 0, 1, 3, (0, 1, 2), (0, 1, 2)),
                          PartitionState("t", 1, 1, 0, (1, 2, 0), (0, 1, 2)), **config)


# -- PREFERRED --------------------------------------------------------------------------------

def test_preferred_election_moves_leadership_back_in_one_batch(three):
    env = three
    controller = led_by_a_follower(env)
    before = env.page.read()
    results = controller.elect_leaders(PREFERRED, {"t": [0, 1]})
    assert codes(results) == {("t", 0): NONE, ("t", 1): NOT_NEEDED}
    assert results[("t", 0)] == (0, None)
    assert "preferred replica 1 leads already" in results[("t", 1)][1]
    image = env.page.read()
    assert state(image, "t", 0) == (0, 4, (0, 1, 2))  # epoch + 1, ISR unchanged
    assert image.partition("t", 1) == before.partition("t", 1)
    assert image.version == before.version + 1  # one record, one batch
    assert controller.elect_leaders(PREFERRED, {"t": [0]}) == {
        ("t", 0): (NOT_NEEDED, "t-0: the preferred replica 0 leads already")}
    assert env.page.read().version == image.version  # nothing to log


def test_preferred_election_needs_the_preferred_replica_alive_and_in_sync(three):
    env = three
    controller = led_by_a_follower(env)
    env.stop_broker(0)
    env.poll(controller)
    results = controller.elect_leaders(PREFERRED, {"t": [0]})
    assert results == {("t", 0): (PREFERRED_NOT_AVAILABLE,
                                  "t-0: the preferred replica 0 is not alive")}
    env.start_broker(0)
    env.poll(controller)  # back, but liveness dropped it from the ISR
    assert state(env.page.read(), "t", 0) == (1, 3, (1, 2))
    results = controller.elect_leaders(PREFERRED, {"t": [0]})
    assert results == {("t", 0): (PREFERRED_NOT_AVAILABLE,
                                  "t-0: the preferred replica 0 is not in the ISR [1,2]")}
    assert state(env.page.read(), "t", 0) == (1, 3, (1, 2))


def test_unknown_topics_and_partitions_and_duplicates(three):
    env = three
    controller = led_by_a_follower(env)
    results = controller.elect_leaders(PREFERRED, {"nope": [0], "t": [5, 0, 0]})
    assert list(results) == [("nope", 0), ("t", 5), ("t", 0)]  # request order, once each
    assert codes(results) == {("nope", 0): UNKNOWN, ("t", 5): UNKNOWN, ("t", 0): NONE}
    assert "topic 'nope' does not exist" in results[("nope", 0)][1]
    assert "has no partition 5 (it has 2)" in results[("t", 5)][1]
    assert state(env.page.read(), "t", 0) == (0, 4, (0, 1, 2))


def test_all_partitions_leaves_out_those_that_need_no_election(three):
    env = three
    controller = led_by_a_follower(env)
    controller.create_topics([{"name": "u", "assignments": {0: [2, 0]}}])
    assert codes(controller.elect_leaders(PREFERRED)) == {("t", 0): NONE}
    assert controller.elect_leaders(PREFERRED, None) == {}
    env.stop_broker(2)
    env.poll(controller)  # u-0 offline: its preferred replica is dead
    assert codes(controller.elect_leaders(PREFERRED)) == {("u", 0): PREFERRED_NOT_AVAILABLE}


def test_a_bad_election_type_and_an_inactive_controller(three):
    env = three
    controller = active(env)
    with pytest.raises(InvalidRequestError, match="election type 7"):
        controller.elect_leaders(7, None)
    standby = env.controller(1)
    env.poll(standby)
    with pytest.raises(NotControllerError):
        standby.elect_leaders(PREFERRED, None)


# -- UNCLEAN ----------------------------------------------------------------------------------

def test_unclean_election_only_for_partitions_without_a_leader(three):
    env = three
    controller = active(env)
    controller.create_topics([{"name": "t", "assignments": {0: [0, 1], 1: [1, 2], 2: [0, 2]}}])
    image = controller.image  # broker 0, the leader of p0 and p2, shrinks their ISRs to itself
    controller.alter_partition(0, [IsrChange("t", p, image.partition("t", p).leader_epoch,
                                             image.partition("t", p).partition_epoch, (0,))
                                   for p in (0, 2)])
    env.stop_broker(0)
    image = env.poll(controller)  # clean elections leave p0 and p2 offline: ISR = {0}
    assert state(image, "t", 0) == (-1, 1, (0,))
    env.stop_broker(2)
    env.poll(controller)
    results = controller.elect_leaders(UNCLEAN, {"t": [0, 1, 2]})
    assert codes(results) == {("t", 0): NONE, ("t", 1): NOT_NEEDED,
                              ("t", 2): ELIGIBLE_NOT_AVAILABLE}
    assert "none of its replicas [0,2] is alive" in results[("t", 2)][1]
    image = env.page.read()
    assert state(image, "t", 0) == (1, 2, (1,))  # the live replica, alone in the ISR
    assert state(image, "t", 1) == (1, 0, (1,))
    assert codes(controller.elect_leaders(UNCLEAN, None)) == {("t", 2): ELIGIBLE_NOT_AVAILABLE}


# -- the automatic rebalance ------------------------------------------------------------------

def test_the_rebalance_runs_every_interval_and_moves_leaders_back(three):
    env = three
    controller = led_by_a_follower(env, leader_imbalance_check_interval_seconds=5)
    for _ in range(4):  # the first check is one interval after becoming active
        assert state(env.poll(controller), "t", 0) == (1, 3, (0, 1, 2))
    assert state(env.poll(controller), "t", 0) == (0, 4, (0, 1, 2))


def test_the_rebalance_can_be_turned_off(three):
    env = three
    controller = led_by_a_follower(env, leader_imbalance_check_interval_seconds=1,
                                   auto_leader_rebalance_enable=False)
    for _ in range(5):
        assert state(env.poll(controller), "t", 0) == (1, 3, (0, 1, 2))


def test_the_rebalance_waits_for_an_imbalance_above_the_percentage(three):
    env = three
    controller = active(env)
    controller.create_topics([{"name": "t", "assignments": {0: [0, 1], 1: [0, 1]}}])
    config = {"leader_imbalance_check_interval_seconds": 1,
              "leader_imbalance_per_broker_percentage": 50}
    controller = take_over_with(env, controller, PartitionState("t", 0, 1, 1, (0, 1), (0, 1)),
                                **config)
    for _ in range(3):  # broker 0 leads 1 of its 2: 50 % is not above 50 %
        assert state(env.poll(controller), "t", 0) == (1, 1, (0, 1))
    controller = take_over_with(env, controller, PartitionState("t", 1, 1, 1, (0, 1), (0, 1)),
                                **config)
    for _ in range(2):
        image = env.poll(controller)
    assert state(image, "t", 0) == (0, 2, (0, 1)) and state(image, "t", 1) == (0, 2, (0, 1))


def test_imbalanced_partitions_is_kafkas_rule_per_preferred_broker():
    def p(n, leader, replicas, isr):
        return PartitionState("t", n, leader, 0, replicas, isr)
    states = [p(0, 1, (0, 1), (0, 1)), p(1, 0, (0, 1), (0, 1)), p(2, 0, (0, 1), (0, 1)),
              p(3, 1, (0, 1), (1,)),  # astray, but its preferred replica is not in sync
              p(4, 0, (1, 0), (0, 1)), p(5, -1, (2, 0), (2,))]
    live = {0, 1, 2}
    # broker 0: 2 astray of 4 (50 %); broker 1: 1 of 1; broker 2: 1 of 1 (offline)
    assert imbalanced_partitions(states, live, 10) == [states[0], states[4], states[5]]
    assert imbalanced_partitions(states, live, 50) == [states[4], states[5]]
    assert imbalanced_partitions(states, live - {2}, 100) == []
    assert imbalanced_partitions(states, live - {1}, 99) == [states[5]]


def test_elect_preferred():
    s = PartitionState("t", 0, 1, 7, (0, 1, 2), (0, 1))
    assert elect_preferred(s, {0, 1, 2}) == PartitionState("t", 0, 0, 8, (0, 1, 2), (0, 1), 1)
    assert elect_preferred(s, {1, 2}) is None
    assert elect_preferred(PartitionState("t", 0, 1, 7, (2, 1, 0), (0, 1)), {0, 1, 2}) is None

