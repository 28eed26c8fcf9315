"""AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and the markers: every transition of a
transaction and every error code, with a fake clock and a fake log."""
from __future__ import annotations

from cluster.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTxnStateError,
    KafkaStorageError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    ProducerFencedError,
    RecordTooLargeError,
    RequestTimedOutError,
    TransactionCoordinatorFencedError,
    UnknownError,
    UnknownTopicOrPartitionError,
    UnsupportedForMessageFormatError,
)
from cluster.metadata.model import GROUP_METADATA_TOPIC
from replica_proc.coordinator_common.partitioning import partition_for
from replica_proc.transaction_coordinator.coordinator import RETRY_BACKOFF_MS
from replica_proc.transaction_coordinator.results import Answer, TxnMarker, route
from replica_proc.transaction_coordinator.states import TransactionState as S
from tests.replica_proc.transaction_coordinator.env import Env
from tests.support.clock import T0

CONCURRENT = ConcurrentTransactionsError.errno
FENCED = ProducerFencedError.errno
MAPPING = InvalidProducerIdMappingError.errno
BAD_STATE = InvalidTxnStateError.errno


def test_add_partitions_starts_a_transaction_and_stores_it(env):
    producer = env.init("t")
    env.clock.advance(10)
    assert env.add("t", producer, [("b", 1), ("a", 0)]) == Answer(0)
    value = env.stored()[-1]
    assert (value.state, value.partitions, value.start_timestamp_ms,
            value.last_update_timestamp_ms) == (S.ONGOING, (("a", 0), ("b", 1)), T0 + 10,
                                                T0 + 10)
    env.clock.advance(10)
    assert env.add("t", producer, [("c", 2)]) == Answer(0)
    value = env.stored()[-1]
    assert (value.partitions, value.start_timestamp_ms, value.last_update_timestamp_ms) == (
        (("a", 0), ("b", 1), ("c", 2)), T0 + 10, T0 + 20)
    writes = len(env.log)
    assert env.add("t", producer, [("a", 0)]) == Answer(0)  # already in: nothing written
    assert len(env.log) == writes


def test_add_offsets_adds_the_groups_offsets_partition(env):
    producer = env.init("t")
    assert env.add_offsets("t", producer, "my-group") == Answer(0)
    assert env.coordinator.metadata("t").partitions == {
        (GROUP_METADATA_TOPIC, partition_for("my-group", 50))}


def test_add_partitions_errors(env):
    producer = env.init("t")
    assert env.add("", producer) == Answer(InvalidRequestError.errno)
    assert env.add("unknown", producer) == Answer(MAPPING)
    assert env.add("t", Answer(0, 999, 0)) == Answer(MAPPING)
    assert env.add("t", Answer(0, producer.producer_id, 1)) == Answer(FENCED)
    assert env.add_offsets("t", Answer(0, 999, 0)) == Answer(MAPPING)
    env.hold = True
    assert env.add("t", producer) is None
    assert env.add("t", producer, [("x", 0)]) == Answer(CONCURRENT)
    assert env.release() == [Answer(0)]
    env.end("t", producer)
    assert env.state() is S.PREPARE_COMMIT
    assert env.add("t", producer) == Answer(CONCURRENT)


def test_add_partitions_not_coordinator_and_loading():
    env = Env(load=False)
    producer = Answer(0, 1, 0)
    assert env.add("t", producer) == Answer(NotCoordinatorError.errno)
    env.coordinator.begin_load(env.coordinator.partition_of("t"), 0)
    assert env.add("t", producer) == Answer(CoordinatorLoadInProgressError.errno)
    assert env.end("t", producer) == Answer(CoordinatorLoadInProgressError.errno)


def test_commit_writes_prepare_then_markers_then_complete(env):
    producer = env.ongoing("t", [("b", 0), ("a", 1)])
    assert env.end("t", producer, committed=True) == Answer(0, 1000, 0)
    assert env.stored()[-1].state is S.PREPARE_COMMIT
    assert env.markers == [TxnMarker("t", 1000, 0, 0, True, (("a", 1), ("b", 0)))]
    env.clock.advance(7)
    env.ack()
    final = env.stored()[-1]
    assert (final.state, final.partitions, final.producer_epoch) == (
        S.COMPLETE_COMMIT, (), 0)
    assert env.coordinator.metadata("t").partitions == set()
    # The next transaction starts from CompleteCommit, with a new start time.
    env.clock.advance(3)
    assert env.add("t", producer, [("c", 0)]) == Answer(0)
    assert env.stored()[-1].start_timestamp_ms == T0 + 10


def test_abort_writes_prepare_abort_then_complete_abort(env):
    producer = env.ongoing()
    assert env.end("t", producer, committed=False) == Answer(0, 1000, 0)
    assert env.stored()[-1].state is S.PREPARE_ABORT
    assert [m.committed for m in env.markers] == [False]
    env.ack()
    assert env.state() is S.COMPLETE_ABORT


def test_end_txn_answers_by_state(env):
    producer = env.init("t")
    assert env.end("t", producer) == Answer(BAD_STATE)  # Empty
    env.add("t", producer)
    env.end("t", producer, committed=True)
    # PrepareCommit with markers pending: a retry waits, the opposite is refused.
    assert env.end("t", producer, committed=True) == Answer(CONCURRENT)
    assert env.end("t", producer, committed=False) == Answer(CONCURRENT)
    env.ack()
    assert env.end("t", producer, committed=True) == Answer(0, 1000, 0)  # a retry
    assert env.end("t", producer, committed=False) == Answer(BAD_STATE)
    env.add("t", producer)
    env.end("t", producer, committed=False)
    env.ack()
    assert env.end("t", producer, committed=False) == Answer(0, 1000, 0)
    assert env.end("t", producer, committed=True) == Answer(BAD_STATE)


def test_end_txn_in_a_prepare_state_with_nothing_pending(env):
    producer = env.ongoing()
    env.end("t", producer, committed=False)
    env.write_error = UnknownError.errno  # the CompleteAbort write fails for good
    env.ack()
    assert env.state() is S.PREPARE_ABORT
    assert env.end("t", producer, committed=False) == Answer(CONCURRENT)
    assert env.end("t", producer, committed=True) == Answer(BAD_STATE)


def test_end_txn_errors(env):
    producer = env.ongoing()
    assert env.end("", producer) == Answer(InvalidRequestError.errno)
    assert env.end("unknown", producer) == Answer(MAPPING)
    assert env.end("t", Answer(0, 5, 0)) == Answer(MAPPING)
    assert env.end("t", Answer(0, 1000, 1)) == Answer(FENCED)  # a newer epoch than ours too
    env.hold = True
    assert env.end("t", producer) is None
    assert env.end("t", producer) == Answer(CONCURRENT)
    assert env.release() == [Answer(0, 1000, 0)]


def test_a_failed_prepare_write_leaves_the_transaction_ongoing(env):
    producer = env.ongoing()
    for error, answer in ((NotEnoughReplicasError.errno, CoordinatorNotAvailableError.errno),
                          (RequestTimedOutError.errno, CoordinatorNotAvailableError.errno),
                          (UnknownTopicOrPartitionError.errno,
                           CoordinatorNotAvailableError.errno),
                          (NotLeaderForPartitionError.errno, NotCoordinatorError.errno),
                          (KafkaStorageError.errno, NotCoordinatorError.errno),
                          (RecordTooLargeError.errno, UnknownError.errno)):
        env.write_error = error
        assert env.end("t", producer) == Answer(answer)
        assert env.state() is S.ONGOING and env.markers == []
    env.write_error = 0
    assert env.end("t", producer) == Answer(0, 1000, 0)


def test_a_zombie_is_fenced_in_every_call(env):
    zombie = env.ongoing()
    assert env.init("t") == Answer(CONCURRENT)  # the new producer aborts the zombie's
    env.ack()
    current = env.init("t")
    assert current.producer_epoch == zombie.producer_epoch + 2
    assert env.add("t", zombie) == Answer(FENCED)
    assert env.add_offsets("t", zombie) == Answer(FENCED)
    assert env.end("t", zombie, committed=True) == Answer(FENCED)
    assert env.end("t", zombie, committed=False) == Answer(FENCED)
    assert env.init("t", producer_id=zombie.producer_id,
                    producer_epoch=zombie.producer_epoch) == Answer(FENCED)
    assert env.add("t", current) == Answer(0)
    assert env.end("t", current) == Answer(0, current.producer_id, current.producer_epoch)


def test_markers_split_by_leader_and_complete_when_all_answered(env):
    producer = env.ongoing("t", [("a", 0), ("a", 1), ("b", 0), ("gone", 0)])
    env.end("t", producer)
    (marker,) = env.markers
    leaders = {("a", 0): 1, ("a", 1): 2, ("b", 0): 1, ("gone", 0): None}
    routes = route([marker], lambda topic, partition: leaders[(topic, partition)])
    assert {b: [m.partitions for m in ms] for b, ms in routes.by_leader.items()} == {
        1: [(("a", 0), ("b", 0))], 2: [(("a", 1),)]}
    assert routes.waiting == () and [m.partitions for m in routes.gone] == [(("gone", 0),)]
    env.markers = []
    c = env.coordinator
    assert c.markers_done(routes.by_leader[1][0], {("a", 0): 0, ("b", 0): 0}).writes == ()
    assert c.markers_done(routes.gone[0], {}, gone=routes.gone[0].partitions).writes == ()
    assert env.state() is S.PREPARE_COMMIT
    env.run(c.markers_done(routes.by_leader[2][0], {("a", 1): 0}))
    assert env.state() is S.COMPLETE_COMMIT


def test_a_partition_without_a_leader_waits():
    marker = TxnMarker("t", 1, 0, 0, True, (("a", 0), ("a", 1)))
    routes = route([marker], lambda topic, partition: -1 if partition else 3)
    assert routes.waiting == (marker.only([("a", 1)]),)
    assert routes.by_leader == {3: [marker.only([("a", 0)])]}


def test_retriable_marker_errors_are_sent_again_after_a_backoff(env):
    producer = env.ongoing("t", [("a", 0), ("b", 0)])
    env.end("t", producer)
    env.ack({("a", 0): NotLeaderForPartitionError.errno})
    assert env.markers == [] and env.state() is S.PREPARE_COMMIT
    assert env.coordinator.metadata("t").partitions == {("a", 0)}
    assert env.advance(RETRY_BACKOFF_MS - 1) is None and env.markers == []
    env.advance(1)
    assert [m.partitions for m in env.markers] == [(("a", 0),)]
    env.ack()
    assert env.state() is S.COMPLETE_COMMIT


def test_a_partition_that_cannot_take_markers_needs_none(env):
    producer = env.ongoing("t", [("a", 0), ("b", 0)])
    env.end("t", producer)
    env.ack({("a", 0): UnsupportedForMessageFormatError.errno})
    assert env.state() is S.COMPLETE_COMMIT


def test_a_superseded_or_failed_marker_stops_the_completion(env):
    for code in (InvalidProducerEpochError.errno, TransactionCoordinatorFencedError.errno,
                 RecordTooLargeError.errno):
        env = Env()
        producer = env.ongoing("t", [("a", 0), ("b", 0)])
        env.end("t", producer)
        env.ack({("a", 0): code})
        assert env.state() is S.PREPARE_COMMIT
        assert env.coordinator.metadata("t").pending is S.COMPLETE_COMMIT
        env.advance(RETRY_BACKOFF_MS)
        assert env.markers == [] and env.stored()[-1].state is S.PREPARE_COMMIT


def test_a_complete_write_that_finds_no_coordinator_is_retried(env):
    producer = env.ongoing()
    env.end("t", producer)
    env.write_error = NotEnoughReplicasError.errno
    env.ack()
    assert env.state() is S.PREPARE_COMMIT
    assert env.coordinator.next_deadline() == env.clock.now + RETRY_BACKOFF_MS
    env.write_error = 0
    env.advance(RETRY_BACKOFF_MS)
    assert env.state() is S.COMPLETE_COMMIT


def test_markers_of_an_unloaded_partition_are_ignored(env):
    producer = env.ongoing()
    env.end("t", producer)
    (marker,) = env.markers
    partition = env.coordinator.partition_of("t")
    env.coordinator.unload(partition)
    assert env.coordinator.markers_done(marker, {("topic", 0): 0}).writes == ()
    env.coordinator.begin_load(partition, 1)
    env.run(env.coordinator.load(partition, 1, env.partition_log(partition)))
    # The reload completes the transaction with markers of coordinator epoch 1; the old
    # marker's answer changes nothing.
    assert env.coordinator.markers_done(marker, {("topic", 0): 0}).writes == ()
    assert [m.coordinator_epoch for m in env.markers] == [0, 1]


def test_a_write_finishing_after_its_partition_moved_answers_not_coordinator(env):
    producer = env.init("t")
    env.hold = True
    assert env.add("t", producer) is None
    env.coordinator.unload(env.coordinator.partition_of("t"))
    assert env.release() == [Answer(NotCoordinatorError.errno)]
