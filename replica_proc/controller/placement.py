"""Where replicas go and who leads: Kafka's replica assignment and leader election.

``assign_replicas`` is Kafka's rack-unaware assignment (``AdminUtils.
assignReplicasToBrokersRackUnaware``): partition p's first replica (its preferred leader)
is broker ``(p + start_index) % n`` of the sorted broker list, so leaders go round-robin
over the brokers from a start index the controller rotates between topics; the other
replicas follow at a shift that grows by one after every n partitions, so followers spread
too, and the replicas of one partition are always on different brokers.

``elect`` is the controller's reaction to a change of the live brokers for one partition
(Kafka's ``PartitionChangeBuilder``, without the fine points of KIP-966): dead brokers
leave the ISR, except that the ISR is never emptied (its last member stays, it has every
acknowledged record); a leader that is alive and in the ISR stays; otherwise the first
replica, in assignment order, that is alive and in the ISR leads; failing that, with
``unclean.leader.election.enable`` the first live replica leads with an ISR of itself
(records may be lost), else the partition is offline (leader -1). The leader epoch grows
by one whenever the leader changes, offline included; the partition epoch by one on every
change (leader or ISR).

``elect_preferred`` is the preferred-replica election (KIP-460 PREFERRED, and the automatic
rebalance): the partition's first replica leads again when it is alive and in the ISR, the
ISR unchanged. ``imbalanced_partitions`` is Kafka's leader-imbalance rule
(``auto.leader.rebalance.enable``): per preferred broker, the share of the partitions it
should lead but does not; above ``leader.imbalance.per.broker.percentage`` its partitions
whose preferred replica could lead are moved back.

Pure functions: any thread may call them.
"""
from __future__ import annotations

import dataclasses

from cluster.metadata.model import NO_LEADER, PartitionState


def assign_replicas(brokers, num_partitions, replication_factor, start_index,
                    start_partition=0, replica_shift=None):
    """Replica lists (preferred leader first) for partitions ``start_partition`` onwards.

    ``brokers``: the ids to place on, sorted; ``replication_factor`` <= len(brokers);
    ``replica_shift`` defaults to ``start_index`` (Kafka draws both at random).
    """
    count = len(brokers)
    if not 1 <= replication_factor <= count:
        raise ValueError(f"replication factor {replication_factor} must be in [1, {count}] "
                         f"for brokers {list(brokers)}")
    shift = start_index if replica_shift is None else replica_shift
    assignment = []
    for partition in range(start_partition, start_partition + num_partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start_index) % count
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (count - 1)) % count])
        assignment.append(replicas)
    return assignment


def elect(state, live, unclean=False):
    """The PartitionState of ``state`` given the set of ``live`` broker ids (see the module
    doc); ``state`` itself when nothing changes."""
    isr = tuple(b for b in state.isr if b in live)
    if not isr:
        isr = (state.leader,) if state.leader in state.isr else state.isr
    if state.leader in live and state.leader in isr:
        leader = state.leader
    else:
        leader = next((b for b in state.replicas if b in isr and b in live), NO_LEADER)
        if leader == NO_LEADER and unclean:
            leader = next((b for b in state.replicas if b in live), NO_LEADER)
            if leader != NO_LEADER:
                isr = (leader,)
    if leader == state.leader and isr == state.isr:
        return state
    epoch = state.leader_epoch + 1 if leader != state.leader else state.leader_epoch
    return PartitionState(state.topic, state.partition, leader, epoch, state.replicas, isr,
                          state.partition_epoch + 1)


def elect_preferred(state, live):
    """``state`` led by its preferred replica (``replicas[0]``), leader epoch + 1; None when
    that replica is not alive or not in the ISR. The caller checks it does not lead
    already (that is no election)."""
    preferred = state.replicas[0]
    if preferred not in live or preferred not in state.isr:
        return None
    return dataclasses.replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1,
                               partition_epoch=state.partition_epoch + 1)


def imbalanced_partitions(states, live, percentage):
    """The partitions of ``states`` (PartitionStates) a preferred-replica election should
    move back, in the order given: group them by preferred replica; for a broker whose
    ratio (partitions it should lead but does not / partitions it should lead) exceeds
    ``percentage``/100, those not led by it whose preferred replica can lead
    (``elect_preferred``). Kafka's ``checkAndTriggerAutoLeaderRebalance``."""
    by_preferred = {}
    for state in states:
        by_preferred.setdefault(state.replicas[0], []).append(state)
    moving = set()
    for broker, preferred in by_preferred.items():
        astray = [s for s in preferred if s.leader != broker]
        if len(astray) * 100 > percentage * len(preferred):
            moving.update((s.topic, s.partition) for s in astray
                          if elect_preferred(s, live) is not None)
    return [s for s in states if (s.topic, s.partition) in moving]
