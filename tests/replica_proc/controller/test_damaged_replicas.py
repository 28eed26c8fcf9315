"""Damaged replicas and eligible leader replicas: the election rule (``placement.elect``)
and the controller that learns from the brokers' ``damaged-replicas.json`` (issue 20)."""
from __future__ import annotations

import dataclasses

from cluster.metadata import data_dir as dd
from cluster.metadata.model import PartitionState
from replica_proc.controller.controller import IsrChange
from replica_proc.controller.placement import elect, elect_preferred
from replica_proc.damaged_replicas import DamagedReplica, read_reports, write_reports

INELIGIBLE_REPLICA = 107


def state(leader=0, isr=(0, 1, 2), elr=(), damaged=(), epoch=3):
    return PartitionState("t", 0, leader, epoch, (0, 1, 2), tuple(isr), 7, tuple(elr),
                          tuple(damaged))


# -- the rule ---------------------------------------------------------------------------------

def test_a_damaged_leader_gives_way_to_an_intact_isr_member_and_leaves_the_isr():
    new = elect(state(damaged=(0,)), {0, 1, 2}, min_isr=2)
    assert (new.leader, new.leader_epoch, new.isr, new.elr) == (1, 4, (1, 2), ())
    assert new.partition_epoch == 8


def test_a_damaged_follower_leaves_the_isr_the_leader_stays():
    new = elect(state(damaged=(2,)), {0, 1, 2}, min_isr=2)
    assert (new.leader, new.leader_epoch, new.isr) == (0, 3, (0, 1))


def test_a_damaged_replica_does_not_lead_while_an_intact_one_is_down_or_starting():
    """At a restart the damaged replica's broker may come alive first: the partition waits
    offline for an intact ISR member (its followers would truncate to what it kept), as
    Kafka waits for an ISR member with unclean election off; the ISR stays as it was."""
    new = elect(state(damaged=(0,)), {0}, min_isr=2)
    assert (new.leader, new.leader_epoch, new.isr, new.elr) == (-1, 4, (0, 1, 2), ())
    back = elect(new, {0, 1}, min_isr=2)  # an intact replica is back: it leads
    assert (back.leader, back.leader_epoch, back.isr, back.elr) == (1, 5, (1,), (2,))


def test_a_damaged_replica_leads_when_every_eligible_one_is_damaged_or_unclean():
    everyone = elect(state(damaged=(0, 1, 2)), {0}, min_isr=2)
    assert everyone.leader == 0  # no copy holds more: better than offline
    unclean = elect(state(damaged=(0,)), {0}, unclean=True, min_isr=2)
    assert unclean.leader == 0  # records may be lost: the topic allows it


def test_the_last_replica_standing_after_every_broker_died():
    """KIP-966's case, made worse by damage: the ISR shrinks to the old leader while
    nobody is alive; that leader comes back first having lost records in recovery."""
    everyone_dead = elect(state(leader=0), set(), min_isr=2)
    assert (everyone_dead.leader, everyone_dead.isr, everyone_dead.elr) == (-1, (0,), (1, 2))
    damaged = dataclasses.replace(everyone_dead, damaged=(0,))
    first_back = elect(damaged, {0}, min_isr=2)
    assert first_back.leader == -1  # the eligible intact replicas are not back yet
    assert (first_back.isr, first_back.elr) == ((0,), (1, 2))
    second_back = elect(first_back, {0, 2}, min_isr=2)
    assert (second_back.leader, second_back.isr, second_back.elr) == (2, (2,), (1,))


def test_elr_only_below_min_insync_replicas_and_never_damaged():
    assert elect(state(), {0, 1}, min_isr=2).elr == ()  # ISR (0, 1) is large enough
    assert elect(state(), {0}, min_isr=2).elr == (1, 2)
    assert elect(state(isr=(0,), elr=(1, 2), damaged=(1,)), {0}, min_isr=2).elr == (2,)
    assert elect(state(isr=(0,), elr=(1, 2)), {0, 1, 2}, min_isr=1).elr == ()


def test_without_damage_the_rule_is_the_old_one():
    plain = state(leader=1)
    assert elect(plain, {0, 1, 2}) is plain
    assert elect(plain, {0, 2}).leader == 0
    assert elect(plain, set()).leader == -1
    assert elect(state(isr=(1,)), {0}, unclean=True).isr == (0,)


def test_an_unclean_election_has_no_elr():
    new = elect(state(leader=1, isr=(1,), elr=(2,)), {0}, unclean=True, min_isr=2)
    assert (new.leader, new.isr, new.elr) == (0, (0,), ())


def test_the_preferred_replica_does_not_lead_while_damaged():
    assert elect_preferred(state(leader=1, damaged=(0,)), {0, 1, 2}) is None
    assert elect_preferred(state(leader=1), {0, 1, 2}).leader == 0


# -- the report file -----------------------------------------------------------------------

def test_reports_round_trip_and_parse_strictly(tmp_path):
    report = DamagedReplica("t", 0, "id", 400, 366, False, "recovery dropped 10 bytes")
    write_reports(tmp_path, [report])
    assert read_reports(tmp_path) == [report]
    path = tmp_path / "damaged-replicas.json"
    path.write_text(path.read_text().replace("366", '"366"'))
    try:
        read_reports(tmp_path)
    except ValueError as exc:
        assert str(path) in str(exc) and "malformed entry" in str(exc)
    else:
        raise AssertionError("a string log end was accepted")


# -- the controller --------------------------------------------------------------------------

def test_the_controller_moves_leadership_off_a_damaged_replica_until_it_heals(env):
    for b in range(3):
        env.start_broker(b)
    controller = env.controller(0)
    env.poll(controller)
    assert controller.create_topics([{"name": "t", "num_partitions": 1,
                                      "replication_factor": 3,
                                      "configs": {"min.insync.replicas": "2"}}]) == {
        "t": (0, None)}
    before = controller.image.partition("t", 0)
    damaged = before.leader
    topic_id = controller.image.topics["t"].topic_id
    broker_dir = dd.broker_dir(env.data_dir, damaged)
    write_reports(broker_dir, [DamagedReplica("t", 0, topic_id, 400, -1, True, "damage")])
    after = env.poll(controller).partition("t", 0)
    assert after.damaged == (damaged,)
    assert after.leader != damaged and damaged not in after.isr
    assert after.leader_epoch == before.leader_epoch + 1
    # the leader proposes it back before it caught up: refused
    join = IsrChange("t", 0, after.leader_epoch, after.partition_epoch,
                     after.isr + (damaged,))
    assert controller.alter_partition(after.leader, [join])[("t", 0)] == (
        INELIGIBLE_REPLICA, None)
    # caught up: the broker takes it off its report; the leader brings it back
    write_reports(broker_dir, [])
    healed = env.poll(controller).partition("t", 0)
    assert healed.damaged == () and healed.leader == after.leader
    join = IsrChange("t", 0, healed.leader_epoch, healed.partition_epoch,
                     healed.isr + (damaged,))
    code, joined = controller.alter_partition(healed.leader, [join])[("t", 0)]
    assert code == 0 and damaged in joined.isr


def test_a_report_of_a_deleted_topics_replica_is_ignored(env):
    env.start_broker(0)
    controller = env.controller(0)
    env.poll(controller)
    controller.create_topics([{"name": "t", "num_partitions": 1, "replication_factor": 1}])
    write_reports(dd.broker_dir(env.data_dir, 0),
                  [DamagedReplica("t", 0, "another-id", 5, 0, False, "old")])
    assert env.poll(controller).partition("t", 0).damaged == ()
