"""The transaction coordinator's runtime without processes (its ``__transaction_state``
log and its marker sender are fakes that hold every write and every marker until the
test lets them go; the clocks are fake): a transaction's first AddPartitionsToTxn or
AddOffsetsToTxn arriving while the previous transaction still writes its markers and
CompleteCommit waits for them and is answered once they are written — no timer runs —
instead of CONCURRENT_TRANSACTIONS; it is answered CONCURRENT_TRANSACTIONS when the
completion is still under way after ``RETRY_BACKOFF_MS``, NOT_COORDINATOR when the
partition is unloaded, and at once when something else refuses it."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from cluster.config.broker import BrokerConfig
from cluster.errors import ConcurrentTransactionsError, NotCoordinatorError
from replica_proc.transaction_coordinator import runtime as transaction_runtime
from replica_proc.transaction_coordinator.coordinator import RETRY_BACKOFF_MS
from replica_proc.transaction_coordinator.results import Answer
from tests.support.clock import T0, FakeClock

CONCURRENT = ConcurrentTransactionsError.errno
TXN = "copier"


class HeldLog:
    """CoordinatorLog's stand-in: every store waits for ``release``."""

    last = None

    def __init__(self, topic, replicas, clock, clock_ms, on_append, on_high_watermark,
                 load_buffer, timeout_ms, on_load, on_unload):
        self.on_load, self.on_unload = on_load, on_unload
        self.held = []
        HeldLog.last = self

    def store(self, partition, pairs, callback, producer=None):
        self.held.append(callback)

    def release(self):
        """Complete every held store (and those they make) with error 0."""
        while self.held:
            self.held.pop(0)(0)

    def expire(self, now):
        pass

    def next_deadline(self):
        return None


class HeldSender:
    """TxnMarkerSender's stand-in: every marker waits for ``answer``."""

    last = None

    def __init__(self, cluster_id, broker_id, metadata, local, connector, clock):
        self.held = []
        HeldSender.last = self

    def send(self, markers, on_done):
        self.held.extend((marker, on_done) for marker in markers)

    def answer(self):
        """Every held marker written (code 0 for each of its partitions)."""
        held, self.held = self.held, []
        for marker, on_done in held:
            on_done(marker, dict.fromkeys(marker.partitions, 0), ())

    def poll(self):
        pass


class Env:
    def __init__(self, monkeypatch):
        monkeypatch.setattr(transaction_runtime, "CoordinatorLog", HeldLog)
        monkeypatch.setattr(transaction_runtime, "TxnMarkerSender", HeldSender)
        self.clock = FakeClock(100.0)
        ids = itertools.count(1000)
        self.runtime = transaction_runtime.TransactionRuntime(
            0, "c" * 22, BrokerConfig({"transaction.state.log.num.partitions": 1}),
            SimpleNamespace(clock=FakeClock(T0)), SimpleNamespace(image=None), None,
            SimpleNamespace(generate_producer_id=lambda: next(ids)), None, self.clock,
            None, None)
        self.coordinator = self.runtime.coordinator
        self.log, self.sender = HeldLog.last, HeldSender.last
        self.log.on_load(0, 0, [])
        self.answers = []
        self.producer = self.call(lambda: self.coordinator.init_producer_id(TXN, 60_000))

    def call(self, operation, opens=False):
        """Run ``operation`` as the request handler does; its answer once the log
        released what it waits for, or None while nothing answered it."""
        before = len(self.answers)
        if opens:
            self.runtime.call_after_completion(TXN, operation, self.answers.append)
        else:
            self.runtime.run(operation(), self.answers.append)
        self.log.release()
        return self.answers[before] if len(self.answers) > before else None

    def add(self, partition):
        return lambda: self.coordinator.add_partitions(
            TXN, self.producer.producer_id, self.producer.producer_epoch, {("out", partition)})

    def add_offsets(self):
        return lambda: self.coordinator.add_offsets(
            TXN, self.producer.producer_id, self.producer.producer_epoch, "group")

    def commit(self):
        return self.call(lambda: self.coordinator.end_txn(
            TXN, self.producer.producer_id, self.producer.producer_epoch, True))

    def committed_transaction(self):
        """A transaction committed (EndTxn answered), its markers not yet written."""
        assert self.call(self.add(0), opens=True) == Answer(0)
        assert self.commit().error == 0
        assert self.sender.held and self.coordinator.completing(TXN)


@pytest.fixture
def env(monkeypatch):
    return Env(monkeypatch)


@pytest.mark.parametrize("opening", ["add", "add_offsets"])
def test_the_next_transaction_waits_for_the_markers_then_is_answered(env, opening):
    env.committed_transaction()
    before = len(env.answers)
    operation = env.add(1) if opening == "add" else env.add_offsets()
    assert env.call(operation, opens=True) is None  # parked, not CONCURRENT_TRANSACTIONS
    env.sender.answer()  # the markers are written: CompleteCommit is stored next
    env.log.release()  # ... and the call runs again, its own write stored
    assert env.answers[before:] == [Answer(0)]
    assert not env.coordinator.completing(TXN)
    # nothing waits any more: the next deadline is the coordinator's scan, seconds away
    assert env.runtime.next_deadline() > env.clock.now + 1
    assert env.commit().error == 0  # the second transaction holds what was added


def test_a_completion_still_under_way_after_the_backoff_answers_concurrent(env):
    env.committed_transaction()
    before = len(env.answers)
    assert env.call(env.add(1), opens=True) is None
    deadline = env.runtime.next_deadline()
    assert deadline == env.clock.now + RETRY_BACKOFF_MS / 1000
    env.clock.now = deadline - 0.001
    env.runtime.expire(env.clock.now)
    assert env.answers[before:] == []
    env.clock.now = deadline
    env.runtime.expire(env.clock.now)
    assert env.answers[before:] == [Answer(CONCURRENT)]


def test_a_waiting_call_of_an_unloaded_partition_answers_not_coordinator(env):
    env.committed_transaction()
    before = len(env.answers)
    assert env.call(env.add(1), opens=True) is None
    env.log.on_unload(0)
    assert env.answers[before:] == [Answer(NotCoordinatorError.errno)]
    assert env.runtime.next_deadline() is None


def test_concurrent_for_another_reason_is_answered_at_once(env):
    # EndTxn's PrepareCommit is being written: nothing completes yet
    env.call(env.add(0), opens=True)
    env.runtime.run(env.coordinator.end_txn(TXN, env.producer.producer_id,
                                            env.producer.producer_epoch, True),
                    env.answers.append)
    before = len(env.answers)
    env.runtime.call_after_completion(TXN, env.add(1), env.answers.append)
    assert env.answers[before:] == [Answer(CONCURRENT)]
