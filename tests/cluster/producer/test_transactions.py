"""The transactional producer against fake brokers (their transaction coordinator is
tests/support/fake_broker.py's): the requests of a commit and of an abort in order,
partitions added once per transaction before their first batch, batches stamped
transactional, offsets sent to the transaction (AddOffsetsToTxn, then TxnOffsetCommit to
the group's coordinator, v3 with the consumer's group metadata; a mismatch is abortable:
CommitFailedError, as Java's), retriable coordinator errors retried and a coordinator that
moved or went away looked up again, fencing fatal for good, a failed batch making commit
fail and abort work (with a new epoch after), an abort failing what was not sent, close
failing a call still waiting, close aborting an open transaction (after sending what is
queued; retried when refused; a commit under way finished instead; not with timeout 0,
nor past close's timeout), partitions new to a transaction added without an idle wait, a
transaction's first AddPartitionsToTxn or AddOffsetsToTxn refused as
CONCURRENT_TRANSACTIONS retried after 20 ms, and API misuse refused as kafka-python does."""
from __future__ import annotations

import threading
import time

import pytest
from kio.schema.errors import ErrorCode

from cluster.errors import (
    CommitFailedError,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    FencedInstanceIdError,
    IllegalArgumentError,
    IllegalStateError,
    InvalidRecordError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
)
from cluster.producer import sender, transaction_manager as tm, txn_requests as tr
from cluster.structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from segments.record.batch_header import BatchHeader
from tests.support.bounds import IN_PROCESS_BOUND

#: What ``producer_of`` (conftest.py) sets here on top of its common settings.
PRODUCER_SETTINGS = {"enable_idempotence": True, "acks": "all", "linger_ms": 0,
                     "transactional_id": "tx"}

TXN_APIS = ("FIND_COORDINATOR", "INIT_PRODUCER_ID", "ADD_PARTITIONS_TO_TXN",
            "ADD_OFFSETS_TO_TXN", "TXN_OFFSET_COMMIT", "END_TXN", "PRODUCE")


def calls(cluster, since=0):
    """(broker id, api name, request) of the transactional requests and Produce."""
    return [(broker, name, request) for broker, name, request in cluster.requests[since:]
            if name in TXN_APIS]


def names(cluster, since=0):
    return [name for _, name, _ in calls(cluster, since)]


def added(cluster, since=0):
    """Every (topic, partition) of the AddPartitionsToTxn requests, in order."""
    return [(t.name, p) for _, name, request in calls(cluster, since)
            if name == "ADD_PARTITIONS_TO_TXN"
            for t in request.v3_and_below_topics for p in t.partitions]


def test_a_commit_finds_the_coordinator_adds_each_partition_once_and_ends_last(
        fake_cluster, producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", partitions=2)
    cluster.txn_coordinator = 1
    producer = producer_of(cluster)
    producer.init_transactions()
    find, init = calls(cluster)[:2]
    assert (find[1], find[2].key, find[2].key_type) == ("FIND_COORDINATOR", "tx", 1)
    assert (init[0], init[1], init[2].transactional_id) == (1, "INIT_PRODUCER_ID", "tx")
    assert init[2].transaction_timeout.total_seconds() == 60
    for _ in range(2):  # partitions are added again in each transaction
        since = len(cluster.requests)
        producer.begin_transaction()
        futures = [producer.send("t", b"v%d" % n, partition=n % 2) for n in range(6)]
        producer.commit_transaction()
        assert all(f.is_done and f.succeeded() for f in futures)
        assert sorted(added(cluster, since)) == [("t", 0), ("t", 1)]
        seen = names(cluster, since)
        assert seen[-1] == "END_TXN" and calls(cluster, since)[-1][2].committed is True
        first_produce = seen.index("PRODUCE")
        assert "ADD_PARTITIONS_TO_TXN" in seen[:first_produce]
        assert calls(cluster, since)[-1][0] == 1  # to the coordinator
        assert all(request.transactional_id == "tx"
                   for _, name, request in calls(cluster, since) if name == "PRODUCE")
    txn = cluster.transactions["tx"]
    assert [(committed, parts) for committed, parts, _ in txn.ended] == [
        (True, {("t", 0), ("t", 1)})] * 2
    headers = [BatchHeader(data) for p in (0, 1) for _, data in cluster.batches("t", p)]
    assert headers and all(h.is_transactional and h.producer_id == txn.producer_id
                           for h in headers)


def open_transaction(fake_cluster, producer_of, coordinator=None):
    """A fake broker and a producer whose transaction holds one record, acknowledged. With
    ``coordinator`` (1): two brokers, "t" led by broker 0, the transaction coordinator on
    broker ``coordinator``."""
    if coordinator is None:
        cluster = fake_cluster(brokers=1)
        cluster.create_topic("t")
    else:
        cluster = fake_cluster(brokers=2)
        cluster.create_topic("t", leaders=[0])
        cluster.txn_coordinator = coordinator
    producer = producer_of(cluster)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"sent").get(timeout=IN_PROCESS_BOUND)
    return cluster, producer


def test_an_abort_ends_the_transaction_uncommitted_and_the_next_one_works(
        fake_cluster, producer_of):
    cluster, producer = open_transaction(fake_cluster, producer_of)
    since = len(cluster.requests)
    producer.abort_transaction()
    end = calls(cluster, since)
    assert [name for _, name, _ in end] == ["END_TXN"] and end[0][2].committed is False
    producer.begin_transaction()
    producer.send("t", b"kept")
    producer.commit_transaction()
    assert [(c, p) for c, p, _ in cluster.transactions["tx"].ended] == [
        (False, {("t", 0)}), (True, {("t", 0)})]


def test_a_transaction_with_nothing_in_it_sends_no_end_txn(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    producer = producer_of(cluster)
    producer.init_transactions()
    since = len(cluster.requests)
    producer.begin_transaction()
    producer.commit_transaction()
    producer.begin_transaction()
    producer.abort_transaction()
    assert names(cluster, since) == []


def test_offsets_go_to_the_transaction_then_to_the_groups_coordinator(
        fake_cluster, producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("in", partitions=2)
    cluster.create_topic("out")
    cluster.txn_coordinator = 1  # the group's coordinator is broker 0
    producer = producer_of(cluster)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", b"copied")
    since = len(cluster.requests)
    offsets = {TopicPartition("in", 0): OffsetAndMetadata(7, "m", -1),
               TopicPartition("in", 1): OffsetAndMetadata(3, None, -1)}
    producer.send_offsets_to_transaction(
        offsets, ConsumerGroupMetadata("copiers", 4, "member-1", None))
    sent = [(broker, name) for broker, name, _ in calls(cluster, since)
            if name != "PRODUCE" and name != "ADD_PARTITIONS_TO_TXN"]
    assert sent == [(1, "ADD_OFFSETS_TO_TXN"), (0, "FIND_COORDINATOR"),
                    (0, "TXN_OFFSET_COMMIT")]
    [commit] = [r for _, name, r in calls(cluster, since) if name == "TXN_OFFSET_COMMIT"]
    assert commit.__version__ == 3  # KIP-447: the consumer's group metadata, checked
    assert (commit.group_id, commit.generation_id, commit.member_id,
            commit.group_instance_id) == ("copiers", 4, "member-1", None)
    assert cluster.txn_committed == {}  # not before the commit
    producer.commit_transaction()
    assert cluster.txn_committed == {"copiers": {("in", 0): 7, ("in", 1): 3}}


def test_a_bare_group_id_sends_no_member(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("in")
    producer = producer_of(cluster)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_offsets_to_transaction(
        {TopicPartition("in", 0): OffsetAndMetadata(2, "", -1)}, "g")
    [commit] = [r for _, name, r in calls(cluster) if name == "TXN_OFFSET_COMMIT"]
    assert (commit.generation_id, commit.member_id, commit.group_instance_id) == (-1, "", None)
    producer.commit_transaction()
    assert cluster.txn_committed == {"g": {("in", 0): 2}}


@pytest.mark.parametrize("code, raised", [
    (ErrorCode.illegal_generation, CommitFailedError),
    (ErrorCode.unknown_member_id, CommitFailedError),
    (ErrorCode.fenced_instance_id, FencedInstanceIdError),
])
def test_a_group_metadata_mismatch_is_abortable(fake_cluster, producer_of, code, raised):
    """KIP-447: a zombie consumer's offsets are refused; as Java's TransactionManager, the
    call fails, commit refuses, the abort works and the next transaction commits."""
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("in")
    cluster.create_topic("out")
    cluster.fail_next("g", None, code, api="TXN_OFFSET_COMMIT")
    producer = producer_of(cluster)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", b"zombie's copy")
    stale = ConsumerGroupMetadata("g", 3, "member-1", "instance-1")
    offsets = {TopicPartition("in", 0): OffsetAndMetadata(9, "", -1)}
    with pytest.raises(raised) as failed:
        producer.send_offsets_to_transaction(offsets, stale)
    assert failed.value.__cause__ is not None or raised is FencedInstanceIdError
    assert names(cluster).count("TXN_OFFSET_COMMIT") == 1  # not retried
    with pytest.raises(KafkaError, match="must be aborted"):
        producer.commit_transaction()
    producer.abort_transaction()
    assert [c for c, _, _ in cluster.transactions["tx"].ended] == [False]
    producer.begin_transaction()
    producer.send("out", b"copy")
    producer.send_offsets_to_transaction(offsets, ConsumerGroupMetadata("g", 4, "member-1",
                                                                        "instance-1"))
    producer.commit_transaction()
    assert [c for c, _, _ in cluster.transactions["tx"].ended] == [False, True]
    assert cluster.txn_committed == {"g": {("in", 0): 9}}


@pytest.mark.parametrize("api, code", [
    ("INIT_PRODUCER_ID", ErrorCode.coordinator_load_in_progress),
    ("INIT_PRODUCER_ID", ErrorCode.not_coordinator),
    ("ADD_PARTITIONS_TO_TXN", ErrorCode.concurrent_transactions),
    ("ADD_PARTITIONS_TO_TXN", ErrorCode.not_coordinator),
    ("END_TXN", ErrorCode.concurrent_transactions),
    ("END_TXN", ErrorCode.coordinator_load_in_progress),
    ("FIND_COORDINATOR", ErrorCode.coordinator_not_available),
])
def test_retriable_coordinator_errors_are_retried(fake_cluster, producer_of, api, code):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    cluster.fail_next("tx", None, code, times=2, api=api)
    producer = producer_of(cluster)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"v")
    producer.commit_transaction()
    assert names(cluster).count(api) == 3  # two failures, then the answer
    finds = names(cluster).count("FIND_COORDINATOR")
    assert finds == (3 if code in (ErrorCode.not_coordinator,
                                   ErrorCode.coordinator_not_available) else 1)
    assert [c for c, _, _ in cluster.transactions["tx"].ended] == [True]


def test_a_newer_producer_fences_the_older_one_for_good(fake_cluster, producer_of):
    cluster, zombie = open_transaction(fake_cluster, producer_of)
    newer = producer_of(cluster)
    newer.init_transactions()  # aborts the zombie's transaction, bumps the epoch
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    for call in (zombie.begin_transaction, zombie.abort_transaction,
                 lambda: zombie.send("t", b"again")):
        with pytest.raises(ProducerFencedError):
            call()
    newer.begin_transaction()
    newer.send("t", b"newer")
    newer.commit_transaction()
    assert [c for c, _, _ in cluster.transactions["tx"].ended] == [False, True]


def test_a_failed_batch_makes_commit_fail_and_abort_work(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    producer = producer_of(cluster)
    producer.init_transactions()
    producer.begin_transaction()
    cluster.fail_next("t", 0, ErrorCode.invalid_record)
    future = producer.send("t", b"refused")
    with pytest.raises(InvalidRecordError):
        future.get(timeout=IN_PROCESS_BOUND)
    with pytest.raises(KafkaError):
        producer.commit_transaction()
    with pytest.raises(IllegalStateError):
        producer.send("t", b"not now")
    producer.abort_transaction()
    assert names(cluster).count("INIT_PRODUCER_ID") == 2  # a new epoch after the gap
    producer.begin_transaction()
    producer.send("t", b"after").get(timeout=IN_PROCESS_BOUND)
    producer.commit_transaction()
    last = BatchHeader(cluster.batches("t", 0)[-1][1])
    assert (last.producer_epoch, last.base_sequence, last.is_transactional) == (1, 0, True)
    assert [c for c, _, _ in cluster.transactions["tx"].ended] == [False, True]


def test_misuse_is_refused_as_kafka_python_does(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    producer = producer_of(cluster)
    with pytest.raises(IllegalStateError, match="init_transactions"):
        producer.send("t", b"v")
    for call in (producer.begin_transaction, producer.commit_transaction,
                 producer.abort_transaction):
        with pytest.raises(IllegalStateError):
            call()
    producer.init_transactions()
    with pytest.raises(IllegalStateError):
        producer.init_transactions()
    with pytest.raises(IllegalStateError, match="READY"):
        producer.send("t", b"v")
    for call in (producer.commit_transaction, producer.abort_transaction,
                 lambda: producer.send_offsets_to_transaction({}, "g")):
        with pytest.raises(IllegalStateError):
            call()
    producer.begin_transaction()
    with pytest.raises(IllegalStateError):
        producer.begin_transaction()
    for metadata in (None, ConsumerGroupMetadata("g", 2, "", None)):  # Java's checks
        with pytest.raises(IllegalArgumentError):
            producer.send_offsets_to_transaction({}, metadata)
    plain = producer_of(cluster, transactional_id=None)
    with pytest.raises(IllegalStateError, match="transactional_id"):
        plain.begin_transaction()


def test_an_abort_fails_the_records_not_yet_sent(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    producer = producer_of(cluster, linger_ms=60000, delivery_timeout_ms=70000)
    producer.init_transactions()
    producer.begin_transaction()
    since = len(cluster.requests)
    future = producer.send("t", b"lingering")
    producer.abort_transaction()
    with pytest.raises(KafkaError):
        future.get(timeout=IN_PROCESS_BOUND)
    assert names(cluster, since) == []  # never sent, nothing to end
    producer.begin_transaction()
    producer.send("t", b"sent")
    producer.commit_transaction()
    stored = BatchHeader(cluster.batches("t", 0)[0][1])
    assert (cluster.records("t", 0)[0].value, stored.producer_epoch,
            stored.base_sequence) == (b"sent", 0, 0)


@pytest.mark.parametrize("api", ["ADD_PARTITIONS_TO_TXN", "INIT_PRODUCER_ID"])
@pytest.mark.parametrize("code", [ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch])
def test_fencing_answers_are_fatal_wherever_they_come(fake_cluster, producer_of, api, code):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    cluster.fail_next("tx", None, code, api=api)
    producer = producer_of(cluster)
    if api == "INIT_PRODUCER_ID":
        with pytest.raises(ProducerFencedError):
            producer.init_transactions()
    else:
        producer.init_transactions()
        producer.begin_transaction()
        future = producer.send("t", b"v")
        with pytest.raises(ProducerFencedError):
            future.get(timeout=IN_PROCESS_BOUND)
        with pytest.raises(ProducerFencedError):
            producer.commit_transaction()
    with pytest.raises(ProducerFencedError):
        producer.begin_transaction()
    assert "PRODUCE" not in names(cluster)


def test_txn_offset_commit_finds_the_groups_coordinator_again(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("in")
    cluster.fail_next("g", None, ErrorCode.not_coordinator, api="TXN_OFFSET_COMMIT")
    cluster.fail_next("g", None, ErrorCode.coordinator_load_in_progress,
                      api="TXN_OFFSET_COMMIT")
    producer = producer_of(cluster)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_offsets_to_transaction({TopicPartition("in", 0): OffsetAndMetadata(
        5, "", -1)}, "g")
    producer.commit_transaction()
    group_finds = [r for _, name, r in calls(cluster)
                   if name == "FIND_COORDINATOR" and r.key_type == 0]
    assert len(group_finds) == 2 and names(cluster).count("TXN_OFFSET_COMMIT") == 3
    assert cluster.txn_committed == {"g": {("in", 0): 5}}


def test_close_fails_a_call_still_waiting(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.txn_coordinator = 7  # no such broker: the call cannot finish
    producer = producer_of(cluster)
    raised = []

    def init():
        try:
            producer.init_transactions(timeout_ms=IN_PROCESS_BOUND * 1000)
        except KafkaError as exc:
            raised.append(exc)
    caller = threading.Thread(target=init)
    caller.start()
    deadline = time.monotonic() + IN_PROCESS_BOUND
    while "FIND_COORDINATOR" not in names(cluster):
        assert time.monotonic() < deadline, "no FindCoordinator sent"
        time.sleep(0.005)
    producer.close()
    caller.join(IN_PROCESS_BOUND)
    assert not caller.is_alive()
    assert [type(exc) for exc in raised] == [IllegalStateError]


def test_a_coordinator_that_went_away_is_looked_up_again(fake_cluster, producer_of):
    cluster, producer = open_transaction(fake_cluster, producer_of, coordinator=1)
    cluster.txn_coordinator = 0
    cluster.stop_broker(1)
    since = len(cluster.requests)
    producer.commit_transaction()
    assert [(broker, name) for broker, name, _ in calls(cluster, since)] == [
        (0, "FIND_COORDINATOR"), (0, "END_TXN")]
    assert [c for c, _, _ in cluster.transactions["tx"].ended] == [True]


def test_init_transactions_after_a_timeout_resumes(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    cluster.txn_coordinator = 7  # no such broker, for now
    producer = producer_of(cluster)
    with pytest.raises(KafkaTimeoutError):
        producer.init_transactions(timeout_ms=100)
    cluster.txn_coordinator = 0
    producer.init_transactions()
    assert names(cluster).count("INIT_PRODUCER_ID") == 1
    producer.begin_transaction()
    producer.send("t", b"v")
    producer.commit_transaction()


def test_close_aborts_the_open_transaction(fake_cluster, producer_of):
    cluster, producer = open_transaction(fake_cluster, producer_of)
    since = len(cluster.requests)
    producer.close(timeout=IN_PROCESS_BOUND)
    end = calls(cluster, since)
    assert [name for _, name, _ in end] == ["END_TXN"] and end[0][2].committed is False
    assert [(c, p) for c, p, _ in cluster.transactions["tx"].ended] == [(False, {("t", 0)})]


def test_close_sends_what_is_queued_then_aborts(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t", partitions=2)
    producer = producer_of(cluster, linger_ms=60000, delivery_timeout_ms=70000)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_offsets_to_transaction({TopicPartition("t", 1): OffsetAndMetadata(
        3, "", -1)}, "g")
    futures = [producer.send("t", b"lingering", partition=0)]
    producer.close(timeout=IN_PROCESS_BOUND)
    assert names(cluster)[-3:] == ["ADD_PARTITIONS_TO_TXN", "PRODUCE", "END_TXN"]
    assert all(f.succeeded() for f in futures)  # written, then aborted, as Java's
    assert [(c, p, o) for c, p, o in cluster.transactions["tx"].ended] == [
        (False, {("t", 0)}, {"g": {("t", 1): 3}})]
    assert cluster.txn_committed == {}


def test_close_after_a_failed_batch_aborts(fake_cluster, producer_of):
    cluster, producer = open_transaction(fake_cluster, producer_of)
    cluster.fail_next("t", 0, ErrorCode.invalid_record)
    with pytest.raises(InvalidRecordError):
        producer.send("t", b"refused").get(timeout=IN_PROCESS_BOUND)
    producer.close(timeout=IN_PROCESS_BOUND)
    assert [c for c, _, _ in cluster.transactions["tx"].ended] == [False]


def test_close_retries_an_abort_the_coordinator_refused(fake_cluster, producer_of):
    cluster, producer = open_transaction(fake_cluster, producer_of)
    cluster.fail_next("tx", None, ErrorCode.concurrent_transactions, times=2, api="END_TXN")
    producer.close(timeout=IN_PROCESS_BOUND)
    assert names(cluster).count("END_TXN") == 3
    assert [c for c, _, _ in cluster.transactions["tx"].ended] == [False]


def test_close_finishes_a_commit_under_way_instead_of_aborting(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    cluster.fail_next("tx", None, ErrorCode.concurrent_transactions, times=3, api="END_TXN")
    producer = producer_of(cluster, retry_backoff_ms=50)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"v").get(timeout=IN_PROCESS_BOUND)
    committer = threading.Thread(target=producer.commit_transaction)
    committer.start()
    deadline = time.monotonic() + IN_PROCESS_BOUND
    while "END_TXN" not in names(cluster):
        assert time.monotonic() < deadline, "no EndTxn sent"
        time.sleep(0.005)
    producer.close(timeout=IN_PROCESS_BOUND)
    committer.join(IN_PROCESS_BOUND)
    assert not committer.is_alive()
    assert [c for c, _, _ in cluster.transactions["tx"].ended] == [True]


def test_close_with_timeout_0_leaves_the_transaction_to_the_coordinator(
        fake_cluster, producer_of):
    cluster, producer = open_transaction(fake_cluster, producer_of)
    since = len(cluster.requests)
    producer.close(timeout=0)
    assert names(cluster, since) == []
    assert cluster.transactions["tx"].ended == []
    assert cluster.transactions["tx"].partitions == {("t", 0)}


def test_close_gives_up_the_abort_at_its_timeout(fake_cluster, producer_of):
    cluster, producer = open_transaction(fake_cluster, producer_of, coordinator=1)
    cluster.stop_broker(1)  # the coordinator: nobody can end the transaction now
    cluster.txn_coordinator = 7
    producer.close(timeout=0.2)
    assert cluster.transactions["tx"].ended == []
    assert not producer._sender.is_alive()


def test_a_partition_new_to_the_transaction_is_added_without_an_idle_wait(
        fake_cluster, producer_of, monkeypatch):
    monkeypatch.setattr(sender, "IDLE_WAIT", 3600.0)  # only a wake-up ends a poll now
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t", partitions=2)
    producer = producer_of(cluster, linger_ms=5)
    producer.init_transactions()
    for partition in (0, 1, 0):
        producer.begin_transaction()
        producer.send("t", b"v", partition=partition).get(timeout=IN_PROCESS_BOUND)
        producer.commit_transaction()
    assert [(c, p) for c, p, _ in cluster.transactions["tx"].ended] == [
        (True, {("t", 0)}), (True, {("t", 1)}), (True, {("t", 0)})]


def test_the_first_add_refused_as_concurrent_is_retried_soon_whatever_the_backoff(
        fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t", partitions=2)
    producer = producer_of(cluster, retry_backoff_ms=60_000, linger_ms=0)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"v", partition=0).get(timeout=IN_PROCESS_BOUND)
    producer.commit_transaction()
    # the previous transaction still completes: Java's producer retries after 20 ms
    cluster.fail_next("tx", None, ErrorCode.concurrent_transactions, times=2,
                      api="ADD_PARTITIONS_TO_TXN")
    producer.begin_transaction()
    producer.send("t", b"w", partition=0).get(timeout=IN_PROCESS_BOUND)
    assert names(cluster).count("ADD_PARTITIONS_TO_TXN") == 4
    producer.commit_transaction()


def test_a_transaction_opened_by_its_offsets_refused_as_concurrent_is_retried_soon(
        fake_cluster, producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("in")
    cluster.create_topic("out")
    producer = producer_of(cluster, retry_backoff_ms=60_000, linger_ms=0)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", b"v").get(timeout=IN_PROCESS_BOUND)
    producer.commit_transaction()
    # a copy job's next transaction: its offsets go before its first batch is drained,
    # while the previous transaction still writes its markers
    cluster.fail_next("tx", None, ErrorCode.concurrent_transactions, times=2,
                      api="ADD_OFFSETS_TO_TXN")
    producer.begin_transaction()
    since = len(cluster.requests)
    producer.send_offsets_to_transaction({TopicPartition("in", 0): OffsetAndMetadata(
        5, "", -1)}, "g", timeout_ms=IN_PROCESS_BOUND * 1000)
    assert names(cluster, since) == ["ADD_OFFSETS_TO_TXN"] * 3 + ["FIND_COORDINATOR",
                                                                  "TXN_OFFSET_COMMIT"]
    producer.commit_transaction()
    assert cluster.txn_committed == {"g": {("in", 0): 5}}


def test_the_short_retry_is_for_the_first_call_refused_as_concurrent_only():
    concurrent = ConcurrentTransactionsError("busy")
    for kind in (tr.ADD_PARTITIONS, tm.ADD_OFFSETS):
        assert tr.retry_backoff(kind, concurrent, True, 0.1) == 0.02
        assert tr.retry_backoff(kind, concurrent, True, 0.005) == 0.005
        assert tr.retry_backoff(kind, concurrent, False, 0.1) == 0.1
        assert tr.retry_backoff(kind, CoordinatorLoadInProgressError("x"), True, 0.1) == 0.1
    assert tr.retry_backoff(tm.END_TXN, concurrent, True, 0.1) == 0.1
