"""Where replicas go and who leads: Kafka's replica assignment and leader election.

``assign_replicas`` is Kafka's rack-unaware assignment (``AdminUtils.
assignReplicasToBrokersRackUnaware``): partition p's first replica (its preferred leader)
is broker ``(p + start_index) % n`` of the sorted broker list, so leaders go round-robin
over the brokers from a start index the controller rotates between topics; the other
replicas follow at a shift that grows by one after every n partitions, so followers spread
too, and the replicas of one partition are always on different brokers.

``elect`` is the controller's reaction to a change of the live brokers, or of the
replicas their brokers reported damaged, for one partition (Kafka's
``PartitionChangeBuilder`` with KIP-966's eligible leader replicas, and a rule of
ringlog's own for damaged replicas). Dead brokers leave the ISR, except that the ISR is
never emptied (its last member stays, it has every acknowledged record). The leader is,
in this order:

1. the current one, if it is alive, in the ISR and not damaged;
2. the first replica (assignment order) that is alive, in the ISR and not damaged;
3. the first that is alive, in the ELR and not damaged; the ISR becomes it alone;
4. a damaged replica — the current leader if it is alive and in the ISR, else the first
   live ISR member — only when every member of the ISR and ELR is damaged (or with
   ``unclean.leader.election.enable``): a replica that lost records in recovery (or whose
   log is offline) never leads while one that has them could, alive or not yet — an
   intact member that is down or still starting is waited for (the partition is offline
   meanwhile, as Kafka waits for an ISR member with unclean election off), so its
   followers never truncate away what it lost;
5. with ``unclean.leader.election.enable``, the first live replica, with an ISR of itself
   and no ELR (records may be lost);
6. nobody: the partition is offline (leader -1).

Under an intact leader (1-3) the damaged replicas leave the ISR; they rejoin it through
the leader's ISR expansion once they have fetched back what they lost (the controller
refuses that while the broker still reports them damaged). ELR (KIP-966): when the ISR is
smaller than ``min.insync.replicas`` the high watermark cannot move (Kafka's acks=all
rule), so the replicas that leave the ISR then keep every acknowledged record and join the
ELR; it is emptied
once the ISR reaches ``min.insync.replicas``, and loses a replica reported damaged. The
leader epoch grows by one whenever the leader changes, offline included; the partition
epoch by one on every change (leader, ISR or ELR).

``elect_preferred`` is the preferred-replica election (KIP-460 PREFERRED, and the automatic
rebalance): the partition's first replica leads again when it is alive, in the ISR and
not damaged, the ISR unchanged. ``imbalanced_partitions`` is Kafka's leader-imbalance rule
(``auto.leader.rebalance.enable``): per preferred broker, the share of the partitions it
should lead but does not; above ``leader.imbalance.per.broker.percentage`` its partitions
whose preferred replica could lead are moved back.

Pure functions: any thread may call them.
"""
from __future__ import annotations

import dataclasses

from cluster.metadata.model import NO_LEADER


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


def elect(state, live, unclean=False, min_isr=1):
    """The PartitionState of ``state`` given the set of ``live`` broker ids and the
    topic's ``min.insync.replicas`` (see the module doc); ``state`` itself when nothing
    changes."""
    damaged = state.damaged
    isr = tuple(b for b in state.isr if b in live)
    if not isr:
        isr = (state.leader,) if state.leader in state.isr else state.isr
    elr = tuple(b for b in state.elr if b not in damaged and b not in isr)

    def intact(members):
        return next((b for b in state.replicas
                     if b in members and b in live and b not in damaged), NO_LEADER)

    if state.leader in live and state.leader in isr and state.leader not in damaged:
        leader = state.leader
    elif (leader := intact(isr)) == NO_LEADER and (leader := intact(elr)) != NO_LEADER:
        isr = (leader,) + tuple(b for b in isr if b in live and b not in damaged)
    if leader != NO_LEADER:
        # an intact replica leads: the damaged ones leave the ISR until they heal
        isr = tuple(b for b in isr if b not in damaged)
    else:
        leader = state.leader if state.leader in live and state.leader in isr else next(
            (b for b in state.replicas if b in isr and b in live), NO_LEADER)
        if leader != NO_LEADER and not unclean and any(
                b not in damaged for b in (*state.isr, *state.elr)):
            # only damaged ones are alive, an intact member is down or still starting:
            # offline until it is back, the ISR as it was
            leader, isr = NO_LEADER, state.isr
        elif leader == NO_LEADER and unclean:
            leader = next((b for b in state.replicas if b in live), NO_LEADER)
            if leader != NO_LEADER:
                isr = (leader,)
                min_isr = 0  # the new leader's log is the truth now: no ELR
    removed = tuple(b for b in state.isr if b not in isr and b not in damaged)
    if len(isr) < min_isr:  # the high watermark is frozen: who leaves keeps every record
        elr = tuple(b for b in state.replicas
                    if (b in elr or b in removed) and b not in isr and b != leader)
    else:
        elr = ()
    if leader == state.leader and isr == state.isr and elr == state.elr:
        return state
    epoch = state.leader_epoch + 1 if leader != state.leader else state.leader_epoch
    return dataclasses.replace(state, leader=leader, leader_epoch=epoch, isr=isr, elr=elr,
                               partition_epoch=state.partition_epoch + 1)


def elect_preferred(state, live):
    """``state`` led by its preferred replica (``replicas[0]``), leader epoch + 1; None when
    that replica is not alive or not in the ISR. The caller checks it does not lead
    already (that is no election)."""
    preferred = state.replicas[0]
    if preferred not in live or preferred not in state.isr or preferred in state.damaged:
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
