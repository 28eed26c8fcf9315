"""transaction.timeout.ms aborts, transactional.id.expiration.ms tombstones, and loading a
``__transaction_state`` partition by replaying its records."""
from __future__ import annotations

from cluster.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    InvalidRequestError,
    NotEnoughReplicasError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
)
from replica_proc.transaction_coordinator import records
from replica_proc.transaction_coordinator.results import Answer
from replica_proc.transaction_coordinator.states import TransactionState as S
from tests.replica_proc.transaction_coordinator.env import TIMEOUT_MS, Env

ABORT_SCAN_MS = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
EXPIRE_SCAN_MS = 3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms
WEEK_MS = 7 * 24 * 3_600_000  # transactional.id.expiration.ms


def test_a_forgotten_transaction_is_aborted_and_its_producer_fenced(env):
    zombie = env.ongoing("t", [("a", 0)])
    assert env.coordinator.next_deadline() == env.clock.now + ABORT_SCAN_MS
    for _ in range(TIMEOUT_MS // ABORT_SCAN_MS):
        env.advance(ABORT_SCAN_MS)
    assert env.state() is S.ONGOING  # start + timeout is not yet before now
    env.advance(ABORT_SCAN_MS)
    abort = env.stored()[-1]
    assert (abort.state, abort.producer_epoch) == (S.PREPARE_ABORT, zombie.producer_epoch + 1)
    assert [(m.committed, m.producer_epoch) for m in env.markers] == [
        (False, zombie.producer_epoch + 1)]
    assert env.end("t", zombie, committed=True) == Answer(ProducerFencedError.errno)
    env.ack()
    assert env.state() is S.COMPLETE_ABORT
    assert env.add("t", zombie) == Answer(ProducerFencedError.errno)
    assert env.init("t").producer_epoch == zombie.producer_epoch + 2


def test_an_abort_that_could_not_be_written_is_tried_at_the_next_scan(env):
    zombie = env.ongoing("t")
    env.write_error = NotEnoughReplicasError.errno
    env.advance(TIMEOUT_MS + ABORT_SCAN_MS)
    assert env.state() is S.ONGOING and env.coordinator.metadata("t").pending is None
    env.write_error = 0
    env.advance(ABORT_SCAN_MS)
    assert env.stored()[-1].producer_epoch == zombie.producer_epoch + 1  # bumped once only
    assert env.state() is S.PREPARE_ABORT


def test_a_transaction_with_a_write_in_flight_is_not_aborted_by_the_scan(env):
    producer = env.ongoing("t")
    env.hold = True
    assert env.end("t", producer) is None
    env.advance(TIMEOUT_MS + ABORT_SCAN_MS)
    assert len(env.held) == 1  # only EndTxn's PrepareCommit
    assert env.release() == [Answer(0, producer.producer_id, producer.producer_epoch)]
    assert env.state() is S.PREPARE_COMMIT


def test_idle_ids_expire_and_come_back_with_a_new_producer_id(env):
    env.init("idle")
    busy = env.ongoing("busy")
    done = env.ongoing("done")
    env.end("done", done)
    env.ack()
    env.advance(WEEK_MS - 1)
    env.advance(EXPIRE_SCAN_MS)  # both scans ran; the abort scan aborted "busy"
    assert env.coordinator.metadata("idle") is None
    assert env.coordinator.metadata("done") is None
    assert env.stored("idle")[-1] is None and env.stored("done")[-1] is None
    assert env.state("busy") is S.PREPARE_ABORT  # timed out: aborted, not expired
    assert env.init("idle").producer_id not in (busy.producer_id, done.producer_id, 1000)


def test_an_id_expiring_is_busy_until_its_tombstone_is_written(env):
    env.init("t")
    env.clock.advance(WEEK_MS)
    env.hold = True
    env.advance(EXPIRE_SCAN_MS)
    assert env.coordinator.metadata("t").pending is S.DEAD
    assert env.init("t") == Answer(ConcurrentTransactionsError.errno)
    env.release(NotEnoughReplicasError.errno)
    assert env.state("t") is S.EMPTY  # the tombstone failed: the id stays
    assert env.init("t") == Answer(0, 1000, 1)


def test_loading_replays_the_partition(env):
    a = env.ongoing("a", [("x", 0)])
    b = env.init("b")
    env.add("b", b, [("y", 1)])
    env.end("b", b)
    env.ack()
    env.init("gone")
    env.clock.advance(WEEK_MS + EXPIRE_SCAN_MS)
    env.run(env.coordinator.poll())  # "gone" (and "b") expire; "a" is aborted
    env.ack()
    env.init("b")
    fresh = Env(load=False)
    fresh.clock.now = env.clock.now
    c = fresh.coordinator
    for partition in range(4):
        c.begin_load(partition, 5)
    assert fresh.init("a") == Answer(CoordinatorLoadInProgressError.errno)
    for partition in range(4):
        fresh.run(c.load(partition, 5, env.partition_log(partition)))
    for txn in ("a", "b"):
        old, new = env.coordinator.metadata(txn), c.metadata(txn)
        assert (new.producer_id, new.producer_epoch, new.state, new.partitions,
                new.timeout_ms, new.start_ms, new.last_update_ms) == (
            old.producer_id, old.producer_epoch, old.state, old.partitions, old.timeout_ms,
            old.start_ms, old.last_update_ms)
    assert c.metadata("gone") is None
    assert fresh.markers == []
    assert fresh.init("a").producer_epoch == a.producer_epoch + 2


def test_loading_completes_prepared_transactions(env):
    producer = env.ongoing("t", [("a", 0), ("b", 3)])
    env.end("t", producer, committed=True)
    env.markers = []  # the old coordinator died before its markers were answered
    fresh = Env(load=False)
    partition = fresh.coordinator.partition_of("t")
    fresh.coordinator.begin_load(partition, 2)
    fresh.run(fresh.coordinator.load(partition, 2, env.partition_log(partition)))
    assert [(m.committed, m.partitions, m.coordinator_epoch) for m in fresh.markers] == [
        (True, (("a", 0), ("b", 3)), 2)]
    assert fresh.init("t") == Answer(ConcurrentTransactionsError.errno)
    fresh.ack()
    assert fresh.state("t") is S.COMPLETE_COMMIT
    assert fresh.stored("t")[-1].state is S.COMPLETE_COMMIT


def test_loading_skips_records_that_do_not_decode_and_applies_tombstones():
    env = Env(load=False)
    key = records.encode_key(records.TransactionLogKey("t"))
    value = records.encode_value(records.TransactionLogValue(5, 2, 1000, S.EMPTY, (), 1, -1))
    stored = [(b"\x00\x07junk", value), (key, value), (key, b"\x00\x09"),
              (records.encode_key(records.TransactionLogKey("u")), value),
              (records.encode_key(records.TransactionLogKey("u")), None)]
    partitions = {env.coordinator.partition_of(t) for t in "tu"}
    for partition in partitions:
        env.coordinator.begin_load(partition, 0)
        env.coordinator.load(partition, 0, stored)
    assert env.state("t") is S.EMPTY and env.coordinator.metadata("t").producer_id == 5
    assert env.coordinator.metadata("u") is None


def test_a_load_superseded_by_a_newer_leadership_is_ignored():
    env = Env(load=False)
    partition = env.coordinator.partition_of("t")
    env.coordinator.begin_load(partition, 1)
    env.coordinator.begin_load(partition, 2)
    assert env.coordinator.load(partition, 1, []).writes == ()
    assert env.init("t") == Answer(CoordinatorLoadInProgressError.errno)
    env.coordinator.load(partition, 2, [])
    assert env.init("t") == Answer(0, 1000, 0)


def test_describe_and_list(env):
    env.ongoing("t", [("a", 0)])
    env.init("idle")
    code, metadata = env.coordinator.describe("t")
    assert code == 0 and metadata.state is S.ONGOING and metadata.partitions == {("a", 0)}
    assert env.coordinator.describe("nobody") == (TransactionalIdNotFoundError.errno, None)
    assert env.coordinator.describe("") == (InvalidRequestError.errno, None)
    code, listed = env.coordinator.transactions()
    assert code == 0 and sorted(m.transactional_id for m in listed) == ["idle", "t"]
    env.clock.advance(WEEK_MS)
    env.hold = True
    env.advance(EXPIRE_SCAN_MS)  # "idle" is expiring: its tombstone is being written
    assert env.coordinator.describe("idle") == (TransactionalIdNotFoundError.errno, None)
    assert [m.transactional_id for m in env.coordinator.transactions()[1]] == ["t"]
    env.coordinator.begin_load(0, 9)
    assert env.coordinator.transactions() == (CoordinatorLoadInProgressError.errno, [])


def test_list_filters_by_state_producer_id_and_duration(env):
    ongoing = env.ongoing("t", [("a", 0)])
    env.clock.now += 5_000
    idle = env.init("idle")

    def listed(**filters):
        code, found = env.coordinator.transactions(**filters)
        assert code == 0
        return sorted(m.transactional_id for m in found)

    assert listed(states={S.ONGOING}) == ["t"]
    assert listed(states={S.EMPTY, S.ONGOING}) == ["idle", "t"]
    assert listed(states=set()) == []  # only unknown names were asked for: nothing matches
    assert listed(producer_ids={idle.producer_id}) == ["idle"]
    assert listed(producer_ids={ongoing.producer_id, 99_999}) == ["t"]
    assert listed(producer_ids=set()) == ["idle", "t"]
    # "t" started 5 s ago; "idle" has no transaction (start -1): Kafka counts it as old
    assert listed(min_duration_ms=4_000) == ["idle", "t"]
    assert listed(min_duration_ms=5_000) == ["idle"]
    assert S.from_kafka_name("PrepareEpochFence") is S.PREPARE_EPOCH_FENCE
    assert S.from_kafka_name("ongoing") is None
