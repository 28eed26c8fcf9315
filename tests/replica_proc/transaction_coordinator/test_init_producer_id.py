"""InitProducerId with a transactional id: new ids, epoch bumps, the abort of an open
transaction, epoch exhaustion, fencing, and the request's own errors."""
from __future__ import annotations

import pytest

from cluster.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    ProducerFencedError,
    UnknownError,
)
from cluster.protocol.frames import ApiKey
from replica_proc.transaction_coordinator import records
from replica_proc.transaction_coordinator.results import Answer, client_error
from replica_proc.transaction_coordinator.states import TransactionState as S
from tests.replica_proc.transaction_coordinator.env import TIMEOUT_MS, Env
from tests.support.clock import T0

CONCURRENT = ConcurrentTransactionsError.errno
FENCED = ProducerFencedError.errno


def test_a_new_id_gets_a_new_producer_id_at_epoch_0_then_bumps(env):
    assert env.init("t") == Answer(0, 1000, 0)
    assert env.stored("t") == [records.TransactionLogValue(1000, 0, TIMEOUT_MS, S.EMPTY, (),
                                                           T0, -1)]
    env.clock.advance(5)
    assert env.init("t", timeout_ms=1234) == Answer(0, 1000, 1)
    assert env.stored("t")[-1] == records.TransactionLogValue(1000, 1, 1234, S.EMPTY, (),
                                                              T0 + 5, -1)
    assert env.init("other") == Answer(0, 1001, 0)  # ids are never shared
    assert env.state("t") is S.EMPTY


def test_after_a_completed_transaction_the_epoch_is_bumped(env):
    producer = env.ongoing()
    assert env.end("t", producer).error == 0
    env.ack()
    assert env.state() is S.COMPLETE_COMMIT
    assert env.init("t") == Answer(0, producer.producer_id, producer.producer_epoch + 1)
    assert env.state() is S.EMPTY


def test_request_errors(env):
    assert env.init("") == Answer(InvalidRequestError.errno)
    assert env.init("t", producer_id=5) == Answer(InvalidRequestError.errno)
    assert env.init("t", producer_epoch=5) == Answer(InvalidRequestError.errno)
    assert env.init("t", timeout_ms=0) == Answer(InvalidTransactionTimeoutError.errno)
    assert env.init("t", timeout_ms=900_001) == Answer(InvalidTransactionTimeoutError.errno)
    assert env.init("t", timeout_ms=900_000).error == 0
    with pytest.raises(ValueError, match="without a transactional id"):
        env.coordinator.init_producer_id(None, 1000)
    assert env.log[1:] == [] and len(env.log) == 1


def test_not_coordinator_and_loading():
    env = Env(load=False)
    assert env.init("t") == Answer(NotCoordinatorError.errno)
    partition = env.coordinator.partition_of("t")
    env.coordinator.begin_load(partition, 3)
    assert env.init("t") == Answer(CoordinatorLoadInProgressError.errno)
    env.run(env.coordinator.load(partition, 3, []))
    assert env.init("t") == Answer(0, 1000, 0)
    env.coordinator.unload(partition)
    assert env.init("t") == Answer(NotCoordinatorError.errno)


def test_the_allocators_error_is_the_answer(env):
    env.allocation_error = CoordinatorLoadInProgressError("waiting for a producer id block")
    assert env.init("t") == Answer(CoordinatorLoadInProgressError.errno)
    env.allocation_error = RuntimeError("a bug")
    assert env.init("t") == Answer(UnknownError.errno)
    env.allocation_error = None
    assert env.init("t") == Answer(0, 1000, 0)


def test_a_failed_write_answers_the_mapped_error_and_changes_nothing(env):
    env.init("t")
    env.write_error = NotEnoughReplicasError.errno
    assert env.init("t") == Answer(CoordinatorNotAvailableError.errno)
    env.write_error = 0
    assert env.init("t") == Answer(0, 1000, 1)  # the failed bump was never applied


def test_concurrent_init_while_a_write_is_in_flight(env):
    env.init("t")
    env.hold = True
    assert env.init("t") is None  # parked on its write
    assert env.init("t") == Answer(CONCURRENT)
    assert env.release() == [Answer(0, 1000, 1)]


def test_an_ongoing_transaction_is_aborted_first_and_its_producer_fenced(env):
    zombie = env.ongoing("t", (("a", 1), ("b", 0)))
    assert env.init("t") == Answer(CONCURRENT)
    abort = env.stored("t")[-1]
    assert (abort.state, abort.producer_epoch, abort.partitions) == (
        S.PREPARE_ABORT, zombie.producer_epoch + 1, (("a", 1), ("b", 0)))
    (marker,) = env.markers
    assert (marker.committed, marker.producer_epoch, marker.partitions) == (
        False, zombie.producer_epoch + 1, (("a", 1), ("b", 0)))
    # The zombie is fenced at once; the new producer retries until the abort completed.
    assert env.end("t", zombie).error == FENCED
    assert env.add("t", zombie).error == FENCED
    assert env.init("t") == Answer(CONCURRENT)
    env.ack()
    assert env.state() is S.COMPLETE_ABORT
    assert env.init("t") == Answer(0, zombie.producer_id, zombie.producer_epoch + 2)
    assert env.end("t", zombie).error == FENCED


def test_a_fence_that_was_not_stored_is_not_bumped_again(env):
    zombie = env.ongoing()
    env.write_error = NotEnoughReplicasError.errno
    assert env.init("t") == Answer(CoordinatorNotAvailableError.errno)
    assert env.state() is S.ONGOING
    env.write_error = 0
    assert env.init("t") == Answer(CONCURRENT)
    assert env.stored()[-1].producer_epoch == zombie.producer_epoch + 1
    env.ack()
    assert env.init("t").producer_epoch == zombie.producer_epoch + 2


def test_prepare_states_answer_concurrent_transactions(env):
    env.end("t", env.ongoing())
    assert env.state() is S.PREPARE_COMMIT
    assert env.init("t") == Answer(CONCURRENT)  # its markers are pending
    # PrepareCommit with nothing pending (its Complete* write failed for good).
    env.write_error = UnknownError.errno
    env.ack()
    assert env.state() is S.PREPARE_COMMIT
    assert env.coordinator.metadata("t").pending is None
    assert env.init("t") == Answer(CONCURRENT)


def test_epoch_exhaustion_gives_a_new_producer_id():
    env = Env(load=False)
    value = records.TransactionLogValue(77, 32765, TIMEOUT_MS, S.COMPLETE_COMMIT, (), T0, T0)
    key = records.encode_key(records.TransactionLogKey("t"))
    partition = env.coordinator.partition_of("t")
    for p in range(4):
        env.coordinator.begin_load(p, 1)
        env.coordinator.load(p, 1, [(key, records.encode_value(value))] if p == partition
                             else [])
    assert env.init("t") == Answer(0, 77, 32766)
    assert env.init("t") == Answer(0, 1000, 0)  # 32766 is exhausted: a new id
    assert env.stored()[-1].producer_id == 1000


def test_an_exhausted_ongoing_producer_is_still_fenced():
    env = Env(load=False)
    value = records.TransactionLogValue(77, 32766, TIMEOUT_MS, S.ONGOING, (("t", 0),), T0, T0)
    key = records.encode_key(records.TransactionLogKey("t"))
    for p in range(4):
        env.coordinator.begin_load(p, 1)
        env.coordinator.load(p, 1, [(key, records.encode_value(value))])
    assert env.init("t") == Answer(CONCURRENT)
    assert env.stored()[-1].producer_epoch == 32767  # never given to a client
    env.ack()
    assert env.init("t") == Answer(0, 1000, 0)


def test_a_resuming_producer_with_its_epoch(env):
    first = env.init("t")
    resumed = env.init("t", producer_id=first.producer_id, producer_epoch=0)
    assert resumed == Answer(0, 1000, 1)
    # A retry of that call (its answer was lost) gets the same epoch, not a second bump.
    assert env.init("t", producer_id=1000, producer_epoch=0) == Answer(0, 1000, 1)
    assert env.init("t", producer_id=1000, producer_epoch=5) == Answer(FENCED)
    assert env.init("t", producer_id=999, producer_epoch=1) == Answer(FENCED)
    assert env.init("t", producer_id=1000, producer_epoch=1) == Answer(0, 1000, 2)


def test_producer_fenced_is_invalid_producer_epoch_for_older_versions():
    old = InvalidProducerEpochError.errno
    assert client_error(ApiKey.INIT_PRODUCER_ID, 1, FENCED) == old
    assert client_error(ApiKey.INIT_PRODUCER_ID, 4, FENCED) == FENCED
    for key in (ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN):
        assert client_error(key, 1, FENCED) == old
        assert client_error(key, 2, FENCED) == FENCED
        assert client_error(key, 0, CONCURRENT) == CONCURRENT
