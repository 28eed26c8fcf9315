"""The leader side of replication without processes (fake clock, fake AlterPartition):
follower states (Kafka's Replica.updateFetchState), the high watermark
(maybeIncrementLeaderHW), ISR shrink and expansion (maybeShrinkIsr, maybeExpandIsr, AlterPartition)
and the produce purgatory's answers (DelayedProduce)."""
from __future__ import annotations

import dataclasses

import pytest

from cluster.errors import (
    NotEnoughReplicasAfterAppendError,
    NotLeaderForPartitionError,
    RequestTimedOutError,
)
from cluster.metadata.model import PartitionState
from cluster.protocol.produce_response import PartitionResult
from replica_proc.delayed_produce import DelayedProduce, PendingPartition, ProducePurgatory
from replica_proc.partition import Partition
from replica_proc.replica_state import NEVER, UNKNOWN, ReplicaState
from segments.log import PartitionLog
from tests.support.broker import batch
from tests.support.clock import T0, FakeClock

LAG = 10.0  # replica.lag.time.max.ms, in seconds


@dataclasses.dataclass(frozen=True)
class EpochState(PartitionState):
    """A PartitionState with the partition epoch the controller side adds."""

    partition_epoch: int = 0


class FakeAlterPartition:
    """Records AlterPartition proposals; the test answers them."""

    def __init__(self):
        self.proposals = []  # [(topic, index, leader_epoch, partition_epoch, isr, callback)]

    def submit(self, topic, index, leader_epoch, partition_epoch, new_isr, callback):
        self.proposals.append((topic, index, leader_epoch, partition_epoch, list(new_isr),
                               callback))
        return True  # taken (AlterPartitionManager.submit's answer)

    @property
    def isrs(self):
        return [p[4] for p in self.proposals]

    def commit(self, partition_epoch, leader=0, leader_epoch=0, replicas=(0, 1, 2)):
        """Answer the oldest proposal with success: its ISR at ``partition_epoch``."""
        topic, index, _, _, isr, callback = self.proposals.pop(0)
        callback(0, EpochState(topic, index, leader, leader_epoch, tuple(replicas), tuple(isr),
                               partition_epoch))

    def fail(self, error_code):
        self.proposals.pop(0)[5](error_code, None)


class RecordingPartition(Partition):
    """A Partition with room (``moves``) for the HW moves it reports."""


@pytest.fixture
def clock():
    return FakeClock(1000.0)


@pytest.fixture
def alter():
    return FakeAlterPartition()


@pytest.fixture
def make(tmp_path, clock, alter):
    """A Partition of broker 0 with ``state`` applied; its HW reports go to ``.moves``."""
    logs = []

    def make(replicas=(0, 1, 2), isr=None, min_isr=1, live=(0, 1, 2), leader=0, epoch=0):
        log = PartitionLog(tmp_path / f"t-{len(logs)}", clock=FakeClock(T0))
        logs.append(log)
        moves = []
        partition = RecordingPartition("t", len(logs) - 1, "id", 0, log, min_isr, clock=clock,
                              replica_lag_max=LAG, alter_partition=alter,
                              on_high_watermark=lambda p, old: moves.append(
                                  (old, p.high_watermark)))
        partition.moves = moves
        partition.update(PartitionState("t", partition.index, leader, epoch, tuple(replicas),
                                        tuple(replicas if isr is None else isr)), live)
        return partition

    yield make
    for log in logs:
        log.close()


def append(partition, n=1, acks=-1):
    """Append ``n`` one-record batches; the log end offset after them."""
    for _ in range(n):
        partition.append_as_leader(batch([b"v"]), acks)
    return partition.log.log_end_offset


def fetch(partition, replica, offset):
    partition.check_follower(replica)
    partition.update_follower(replica, offset, partition.log.log_end_offset)


# -- follower state (Replica.updateFetchState) ----------------------------------------------

def test_a_fetch_at_the_leaders_end_is_caught_up_at_the_fetch_time():
    state = ReplicaState(1)
    assert (state.log_end_offset, state.last_caught_up_time) == (UNKNOWN, NEVER)
    state.on_fetch(5, 5, now=10.0)
    assert (state.log_end_offset, state.last_fetch_time, state.last_caught_up_time) == (
        5, 10.0, 10.0)


def test_a_fetch_at_the_leaders_previous_end_is_caught_up_at_the_previous_fetch_time():
    state = ReplicaState(1)
    state.on_fetch(3, 5, now=10.0)  # behind: not caught up
    assert state.last_caught_up_time == NEVER
    state.on_fetch(5, 8, now=12.0)  # has what the leader had at 10.0, not what it has now
    assert (state.log_end_offset, state.last_caught_up_time) == (5, 10.0)
    state.on_fetch(6, 9, now=14.0)  # behind both the leader now and then: unchanged
    assert state.last_caught_up_time == 10.0


def test_caught_up_means_at_the_leaders_end_or_recently_caught_up():
    state = ReplicaState(1)
    state.on_fetch(5, 5, now=10.0)
    assert state.is_caught_up(9, now=10.0 + LAG, max_lag=LAG)
    assert not state.is_caught_up(9, now=10.1 + LAG, max_lag=LAG)
    assert state.is_caught_up(5, now=1e9, max_lag=LAG)


def test_reset_by_a_new_leader_forgets_all_but_isr_membership():
    state = ReplicaState(1)
    state.on_fetch(5, 5, now=10.0)
    state.reset(20.0, 7, new_leader=False, in_sync=True)  # re-elected: keeps the LEO
    assert (state.log_end_offset, state.last_fetch_time, state.last_caught_up_time) == (
        5, 20.0, 20.0)
    state.reset(30.0, 7, new_leader=True, in_sync=False)
    assert (state.log_end_offset, state.last_fetch_time, state.last_caught_up_time) == (
        UNKNOWN, 0.0, NEVER)


def test_the_leader_resets_its_followers_on_a_new_epoch(make, clock):
    partition = make()
    end = append(partition, 3)
    fetch(partition, 1, end)
    clock.advance(1.0)
    partition.update(PartitionState("t", 0, 0, 1, (0, 1, 2), (0, 1)))
    assert partition.leader_epoch_start_offset == end
    one, two = partition.followers[1], partition.followers[2]
    assert (one.log_end_offset, one.last_fetch_time, one.last_caught_up_time) == (
        end, clock.now, clock.now)
    assert two.last_caught_up_time == NEVER  # not in the ISR
    partition.update(PartitionState("t", 0, 1, 2, (0, 1, 2), (0, 1)))  # now a follower
    assert partition.followers == {}
    partition.update(PartitionState("t", 0, 0, 3, (0, 1, 2), (0, 1)))  # leads again: new
    assert partition.followers[1].log_end_offset == UNKNOWN


def test_a_fetch_from_a_broker_outside_the_replicas_is_not_leader_or_follower(make):
    partition = make(replicas=(0, 1))
    with pytest.raises(NotLeaderForPartitionError, match="replica 2: not one of the replicas"):
        partition.check_follower(2)
    with pytest.raises(NotLeaderForPartitionError):
        partition.check_follower(0)  # itself


# -- the high watermark (maybeIncrementLeaderHW) --------------------------------------------

def test_the_hw_is_the_smallest_leo_of_the_isr_and_never_decreases(make):
    partition = make()
    end = append(partition, 3)
    assert partition.high_watermark == 0
    fetch(partition, 1, end)
    assert partition.high_watermark == 0  # follower 2 has not fetched
    fetch(partition, 2, 1)
    assert partition.high_watermark == 1 and partition.moves == [(0, 1)]
    fetch(partition, 2, end)
    assert partition.high_watermark == end and partition.moves[-1] == (1, end)
    fetch(partition, 2, 1)  # a follower that truncated: the HW stays
    assert partition.high_watermark == end


def test_replication_factor_1_moves_the_hw_on_append_without_reporting(make):
    partition = make(replicas=(0,))
    assert append(partition, 2) == partition.high_watermark == 2
    assert partition.moves == []  # the produce handler reports an append's move itself


def test_the_hw_freezes_while_the_isr_is_below_min_isr_or_the_replication_factor(make):
    frozen = make(replicas=(0, 1, 2), isr=(0,), min_isr=2)
    append(frozen, 2, acks=1)
    assert frozen.high_watermark == 0
    capped = make(replicas=(0, 1), isr=(0, 1), min_isr=5)  # min(5, RF 2) = 2: not frozen
    end = append(capped, 2, acks=1)
    fetch(capped, 1, end)
    assert capped.high_watermark == end


def test_a_caught_up_live_follower_outside_the_isr_holds_the_hw(make):
    partition = make(replicas=(0, 1), isr=(0,))
    partition.alter_partition = None  # (it would join the ISR too: not this test's subject)
    fetch(partition, 1, 0)  # caught up at the leader's end
    append(partition, 2)
    assert partition.high_watermark == 0  # waits for the caught-up follower
    dead = make(replicas=(0, 1), isr=(0,), live=(0,))
    dead.alter_partition = None
    fetch(dead, 1, 0)
    append(dead, 2)
    assert dead.high_watermark == 2  # a dead broker is not waited for


# -- ISR expansion (maybeExpandIsr, AlterPartition) -----------------------------------------

def test_a_follower_joins_the_isr_once_at_the_hw_and_the_epoch_start(make, alter, clock):
    partition = make(replicas=(0, 1, 2), isr=(0, 1))
    end = append(partition, 4)
    fetch(partition, 1, end)
    assert partition.high_watermark == end
    fetch(partition, 2, end - 1)  # below the HW
    assert alter.proposals == []
    fetch(partition, 2, end)
    assert alter.isrs == [[0, 1, 2]] and alter.proposals[0][:4] == ("t", 0, 0, 0)
    assert partition.maximal_isr == (0, 1, 2)
    end = append(partition, 1)
    fetch(partition, 1, end)
    assert partition.high_watermark == end - 1  # the pending addition counts at once
    alter.commit(partition_epoch=1)
    assert partition.isr == (0, 1, 2) and partition.pending_isr is None
    assert partition.partition_epoch == 1


def test_a_follower_below_the_epoch_start_does_not_join(make, alter):
    partition = make(replicas=(0, 1), isr=(0,))
    append(partition, 3)
    partition.update(PartitionState("t", 0, 0, 1, (0, 1), (0,)))  # epoch 1 starts at 3
    fetch(partition, 1, 0)
    assert partition.high_watermark == 3 and alter.proposals == []
    fetch(partition, 1, 3)
    assert alter.isrs == [[0, 1]]


def test_one_isr_change_at_a_time_and_a_failed_one_is_proposed_again(make, alter):
    partition = make(replicas=(0, 1, 2), isr=(0,))
    fetch(partition, 1, 0)
    fetch(partition, 2, 0)  # qualifies too, but a change is in flight
    assert alter.isrs == [[0, 1]]
    alter.fail(58)  # INVALID_UPDATE_VERSION, say
    assert partition.pending_isr is None and partition.isr == (0,)
    fetch(partition, 2, 0)
    assert alter.isrs == [[0, 2]]


def test_a_new_state_settles_a_pending_change_and_a_stale_one_is_ignored(make, alter):
    partition = make(replicas=(0, 1), isr=(0,))
    fetch(partition, 1, 0)
    assert partition.pending_isr == (0, 1)
    partition.update(EpochState("t", 0, 0, 0, (0, 1), (0, 1), 4))
    assert partition.pending_isr is None and partition.partition_epoch == 4
    alter.commit(partition_epoch=1, replicas=(0, 1))  # the late answer changes nothing
    assert partition.partition_epoch == 4
    assert not partition.update(EpochState("t", 0, 0, 0, (0, 1), (0,), 3))  # older
    assert partition.isr == (0, 1)


# -- ISR shrink (maybeShrinkIsr, AlterPartition) --------------------------------------------

def test_a_follower_not_caught_up_for_the_lag_time_leaves_the_isr(make, alter, clock):
    partition = make()
    end = append(partition, 2)
    fetch(partition, 1, end)
    fetch(partition, 2, 1)
    assert partition.high_watermark == 1
    clock.advance(LAG)
    assert not partition.maybe_shrink_isr()  # exactly the lag: still caught up
    end = append(partition, 1)
    fetch(partition, 1, end)
    clock.advance(0.5)
    assert partition.maybe_shrink_isr()
    assert alter.isrs == [[0, 1]]
    assert not partition.maybe_shrink_isr()  # one change at a time
    append(partition, 1)
    assert partition.high_watermark == 1  # a shrink counts once committed
    alter.commit(partition_epoch=1)
    assert partition.isr == (0, 1) and partition.high_watermark == end
    assert partition.moves[-1] == (1, end)


def test_a_follower_at_the_leaders_end_stays_however_long_ago_it_fetched(make, alter, clock):
    partition = make(replicas=(0, 1))
    end = append(partition, 2)
    fetch(partition, 1, end)
    clock.advance(100 * LAG)
    assert not partition.maybe_shrink_isr() and alter.proposals == []


def test_followers_that_never_fetched_leave_after_the_lag_time(make, alter, clock):
    partition = make()
    clock.advance(LAG + 1)
    assert partition.maybe_shrink_isr()
    assert alter.isrs == [[0]]


def test_without_an_alter_partition_channel_the_isr_never_changes(make, clock):
    partition = make()
    partition.alter_partition = None
    clock.advance(LAG + 1)
    assert not partition.maybe_shrink_isr()


# -- the produce purgatory (DelayedProduce) -------------------------------------------------

def delayed(partitions, deadline=50.0):
    """A DelayedProduce waiting for each partition's current log end; its results."""
    results = [PartitionResult(p.index, 0, 0, -1, 0, None) for p in partitions]
    pending = [PendingPartition(("t", p.index), p, p.log.log_end_offset, results, n)
               for n, p in enumerate(partitions)]
    return DelayedProduce(deadline, 5000, pending, [("t", results)], "ctx"), results


def purgatory_of(*partitions):
    hosted = {("t", p.index): p for p in partitions}
    return ProducePurgatory(hosted.get), hosted


def test_a_delayed_produce_completes_when_every_hw_passes_its_records(make):
    a, b = make(replicas=(0, 1)), make(replicas=(0, 1))
    append(a, 2)
    append(b, 1)
    purgatory, _ = purgatory_of(a, b)
    produce, results = delayed([a, b])
    purgatory.park(produce)
    fetch(a, 1, 2)
    assert purgatory.check(("t", 0)) == []
    fetch(b, 1, 1)
    assert purgatory.check(("t", 1)) == [produce]
    assert [r.error_code for r in results] == [0, 0] and len(purgatory) == 0


def test_a_delayed_produce_with_the_isr_below_min_isr_answers_after_append(make):
    partition = make(replicas=(0, 1), min_isr=1)
    append(partition, 1)
    purgatory, _ = purgatory_of(partition)
    produce, results = delayed([partition])
    purgatory.park(produce)
    partition.min_insync_replicas = 3  # raised while the produce waits; min(3, RF 2) = 2
    fetch(partition, 1, 1)
    assert purgatory.check(("t", 0)) == [produce]
    assert results[0].error_code == NotEnoughReplicasAfterAppendError.errno
    assert "min.insync.replicas=3" in results[0].message


def test_a_delayed_produce_answers_not_leader_when_leadership_moves(make):
    partition, other = make(replicas=(0, 1)), make(replicas=(0, 1))
    append(partition, 1)
    append(other, 1)
    purgatory, hosted = purgatory_of(partition, other)
    produce, results = delayed([partition])
    purgatory.park(produce)
    partition.update(PartitionState("t", 0, 1, 1, (0, 1), (1,)))
    assert purgatory.on_change({("t", 0)}) == [produce]
    assert results[0].error_code == NotLeaderForPartitionError.errno
    produce, results = delayed([other])
    purgatory.park(produce)
    del hosted[("t", 1)]  # deleted: the key no longer finds it
    assert purgatory.on_change({("t", 1)}) == [produce]
    assert results[0].error_code == NotLeaderForPartitionError.errno


def test_a_delayed_produce_times_out_only_for_partitions_still_waiting(make):
    a, b = make(replicas=(0, 1)), make(replicas=(0, 1))
    append(a, 1)
    append(b, 1)
    purgatory, _ = purgatory_of(a, b)
    produce, results = delayed([a, b], deadline=50.0)
    purgatory.park(produce)
    fetch(a, 1, 1)
    assert purgatory.check(("t", 0)) == []
    assert purgatory.next_deadline() == 50.0
    assert purgatory.expire(49.9) == []
    assert purgatory.expire(50.0) == [produce]
    assert [r.error_code for r in results] == [0, RequestTimedOutError.errno]
    assert "within the request's timeout of 5000 ms" in results[1].message
    assert purgatory.next_deadline() is None and len(purgatory) == 0


def test_a_cancelled_produce_leaves_the_purgatory(make):
    partition = make(replicas=(0, 1))
    append(partition, 1)
    purgatory, _ = purgatory_of(partition)
    produce, _ = delayed([partition])
    purgatory.park(produce)
    purgatory.cancel(produce)
    purgatory.cancel(produce)
    fetch(partition, 1, 1)
    assert purgatory.check(("t", 0)) == [] and len(purgatory) == 0
    assert purgatory.expire(1e9) == []


def test_a_damaged_replica_leads_only_where_the_controller_knew_of_the_damage(make):
    """A replica that lost records (``damaged``) made leader by a state that does not name it
    damaged (a replayed metadata log, a report not read yet) refuses to act as leader: a
    follower's OffsetsForLeaderEpoch would truncate the intact replicas to what it kept. Made
    leader knowing the damage (no intact replica could lead), it leads."""
    partition = make(leader=0, epoch=1)
    partition.damaged = True
    with pytest.raises(NotLeaderForPartitionError, match="without knowing"):
        partition.check_leader()
    partition.update(PartitionState("t", partition.index, 0, 2, (0, 1, 2), (0,),
                                    damaged=(0,)))
    partition.check_leader()
    partition.damaged = False  # healed: leads whatever the state says
    partition.update(PartitionState("t", partition.index, 0, 3, (0, 1, 2), (0, 1)))
    partition.check_leader()
