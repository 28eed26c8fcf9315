"""TransactionMetadata's two-step transitions: what each prepare computes, the pending
state that blocks a second change, and the transitions Kafka refuses (a coordinator bug,
raised)."""
from __future__ import annotations

import dataclasses

import pytest

from replica_proc.transaction_coordinator.metadata import (
    EPOCH_EXHAUSTED,
    IllegalTransition,
    TransactionMetadata,
)
from replica_proc.transaction_coordinator.results import NOTHING, Answer, Result
from replica_proc.transaction_coordinator.states import TransactionState as S

T0 = 1_700_000_000_000


def metadata(state=S.EMPTY, epoch=0, partitions=(), start=-1):
    return TransactionMetadata("t", 7, epoch, 1000, state, T0, partitions, start)


def test_a_transaction_from_start_to_commit():
    m = metadata()
    m.complete(m.prepare_add_partitions({("a", 0)}, T0 + 1))
    assert (m.state, m.partitions, m.start_ms, m.last_update_ms) == (
        S.ONGOING, {("a", 0)}, T0 + 1, T0 + 1)
    m.complete(m.prepare_end(S.PREPARE_COMMIT, T0 + 2))
    assert (m.state, m.partitions) == (S.PREPARE_COMMIT, {("a", 0)})
    transit = m.prepare_complete(T0 + 3)
    assert transit.partitions == frozenset() and transit.last_producer_epoch == 0
    m.complete(transit)
    assert (m.state, m.partitions, m.start_ms, m.last_update_ms) == (
        S.COMPLETE_COMMIT, set(), T0 + 1, T0 + 3)
    assert transit.record_value().partitions == ()


def test_one_change_at_a_time():
    m = metadata()
    transit = m.prepare_add_partitions({("a", 0)}, T0)
    assert m.pending is S.ONGOING
    with pytest.raises(IllegalTransition, match="Ongoing is pending"):
        m.prepare_add_partitions({("b", 0)}, T0)
    with pytest.raises(IllegalTransition, match="completing Empty while Ongoing is pending"):
        m.complete(dataclasses.replace(transit, state=S.EMPTY))
    m.complete(transit)
    assert m.pending is None
    with pytest.raises(IllegalTransition, match="while nothing is pending"):
        m.complete(transit)
    # A transition whose content does not follow from the state is refused too.
    bad = m.prepare_end(S.PREPARE_ABORT, T0)
    with pytest.raises(IllegalTransition, match="unexpected transition"):
        m.complete(dataclasses.replace(bad, partitions=frozenset({("z", 9)})))


@pytest.mark.parametrize(("state", "prepare"), [
    (S.EMPTY, lambda m: m.prepare_end(S.PREPARE_COMMIT, T0)),
    (S.EMPTY, lambda m: m.prepare_fence_epoch()),
    (S.PREPARE_COMMIT, lambda m: m.prepare_add_partitions({("a", 0)}, T0)),
    (S.ONGOING, lambda m: m.prepare_dead()),
    (S.ONGOING, lambda m: m.prepare_increment_epoch(1000, None, T0)),
    (S.ONGOING, lambda m: m.prepare_rotation(8, 1000, T0, False)),
    (S.COMPLETE_ABORT, lambda m: m.prepare_end(S.PREPARE_ABORT, T0)),
])
def test_transitions_kafka_refuses(state, prepare):
    m = metadata(state, partitions=() if state is S.EMPTY else (("a", 0),), start=T0)
    with pytest.raises(IllegalTransition):
        prepare(m)


def test_epochs():
    m = metadata(epoch=EPOCH_EXHAUSTED - 1)
    assert not m.epoch_exhausted
    m.complete(m.prepare_increment_epoch(1000, None, T0))
    assert m.producer_epoch == EPOCH_EXHAUSTED and m.epoch_exhausted
    with pytest.raises(IllegalTransition, match="no epoch left"):
        m.prepare_increment_epoch(1000, None, T0)
    m.complete(m.prepare_rotation(8, 1000, T0, True))
    assert (m.producer_id, m.producer_epoch, m.last_producer_epoch,
            m.previous_producer_id) == (8, 0, EPOCH_EXHAUSTED, 7)
    fenced = metadata(S.ONGOING, epoch=2**15 - 1, partitions=(("a", 0),), start=T0)
    with pytest.raises(IllegalTransition, match="cannot fence"):
        fenced.prepare_fence_epoch()
    assert metadata().prepare_increment_epoch(1000, 5, T0) is None  # neither epoch: fenced


def test_a_failed_fence_is_not_bumped_twice():
    m = metadata(S.ONGOING, epoch=4, partitions=(("a", 0),), start=T0)
    assert m.prepare_fence_epoch().producer_epoch == 5
    m.pending = None
    m.failed_epoch_fence = True
    assert m.prepare_fence_epoch().producer_epoch == 4


def test_results_add_up_and_refuse_two_answers():
    both = Result(Answer(0)) + Result(markers=("m",)) + NOTHING
    assert both == Result(Answer(0), (), ("m",))
    with pytest.raises(ValueError, match="two answers"):
        Result(Answer(0)) + Result(Answer(1))
