"""KafkaProducer across a leader change, against fake brokers (threads of this process):
every retriable partition error is retried (after a metadata refresh for the
invalid-metadata ones) until delivered or until delivery_timeout_ms, a leader that moves
between two brokers, a broker that dies or hangs with a request in flight (retried: at
least once), and the order of a partition kept with one request in flight."""
from __future__ import annotations

import logging
import threading
import time

import pytest

from cluster.errors import (
    FencedLeaderEpochError,
    KafkaStorageError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from tests.support.bounds import IN_PROCESS_BOUND
from tests.support.waits import wait_for

#: What ``producer_of`` (conftest.py) sets here on top of its common settings.
PRODUCER_SETTINGS = {"linger_ms": 0, "reconnect_backoff_ms": 5, "reconnect_backoff_max_ms": 50}

RETRIABLE = [NotLeaderForPartitionError, LeaderNotAvailableError, NotEnoughReplicasError,
             NotEnoughReplicasAfterAppendError, RequestTimedOutError, KafkaStorageError,
             UnknownTopicOrPartitionError, FencedLeaderEpochError, UnknownLeaderEpochError]


def produce_requests(cluster, since=0):
    return [broker for broker, name, _ in cluster.requests[since:] if name == "PRODUCE"]


@pytest.mark.parametrize("error", RETRIABLE, ids=lambda e: e.message)
def test_a_retriable_partition_error_is_retried_until_delivered(fake_cluster, producer_of,
                                                                 error):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    producer = producer_of(cluster)
    assert producer.send("t", b"first").get(IN_PROCESS_BOUND).offset == 0
    before = len(cluster.requests)
    cluster.fail_next("t", 0, error.errno, times=2)
    assert producer.send("t", b"second").get(IN_PROCESS_BOUND).offset == 1
    names = [name for _, name, _ in cluster.requests[before:]]
    produces = [n for n, name in enumerate(names) if name == "PRODUCE"]
    assert len(produces) == 3
    for refused, retry in zip(produces, produces[1:]):
        # Kafka's InvalidMetadataException rule: refresh the metadata before the retry.
        assert ("METADATA" in names[refused + 1:retry]) == error.invalid_metadata, names
    assert [r.value for r in cluster.records("t", 0)] == [b"first", b"second"]
    assert producer.metrics()["producer-metrics"]["record-retry-total"] == 2


def test_a_retry_is_one_warning_in_kafkas_words(fake_cluster, producer_of, caplog):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    producer = producer_of(cluster, retries=3)
    assert producer.send("t", b"first").get(IN_PROCESS_BOUND).offset == 0
    cluster.fail_next("t", 0, NotLeaderForPartitionError.errno, times=2)
    with caplog.at_level(logging.WARNING, logger="cluster.producer.sender"):
        assert producer.send("t", b"second").get(IN_PROCESS_BOUND).offset == 1
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "retrying produce to t-0 (attempt 2 of 4)", "retrying produce to t-0 (attempt 3 of 4)"]


def test_errors_until_the_delivery_timeout_give_a_timeout_naming_the_last(fake_cluster,
                                                                         producer_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("t")
    producer = producer_of(cluster, request_timeout_ms=100, delivery_timeout_ms=300,
                           retry_backoff_ms=20)
    cluster.fail_next("t", 0, NotEnoughReplicasError.errno, times=10_000)
    future = producer.send("t", b"never")
    with pytest.raises(KafkaTimeoutError,
                       match=r"Expiring 1 record\(s\) for t-0: \d+ ms has passed since batch "
                             r"creation.*last error.*NotEnoughReplicasError") as raised:
        future.get(IN_PROCESS_BOUND)
    assert isinstance(raised.value.__cause__, NotEnoughReplicasError)
    assert len(produce_requests(cluster)) >= 2  # retried meanwhile
    assert cluster.records("t", 0) == []


def test_a_leader_moving_between_brokers_keeps_every_record_once_in_order(fake_cluster,
                                                                          producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("moving", leaders=[0])
    producer = producer_of(cluster, max_in_flight_requests_per_connection=1, batch_size=256,
                           linger_ms=1)
    values = [b"%04d" % i for i in range(600)]
    futures = [producer.send("moving", value) for value in values[:300]]
    futures[0].get(IN_PROCESS_BOUND)
    cluster.move_leader("moving", 0, 1)  # while the rest is queued or in flight
    futures += [producer.send("moving", value) for value in values[300:]]
    futures[400].get(IN_PROCESS_BOUND)
    cluster.move_leader("moving", 0, 0)  # and back
    producer.flush(IN_PROCESS_BOUND)
    assert [f.get(0).offset for f in futures] == list(range(600))
    assert [r.value for r in cluster.records("moving", 0)] == values
    assert set(produce_requests(cluster)) == {0, 1}


def test_a_leader_that_dies_with_a_request_in_flight_retries_it_at_the_new_one(fake_cluster,
                                                                              producer_of):
    # Broker 0 takes the request but never reads it (paused), then dies; the client fails
    # the request (KafkaConnectionError) and the batch goes to broker 1, the new leader.
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    producer = producer_of(cluster)
    assert producer.send("t", b"first").get(IN_PROCESS_BOUND).offset == 0
    cluster.brokers[0].paused.set()
    future = producer.send("t", b"second")
    wait_for(lambda: producer._sender._in_flight, "the request in flight")
    cluster.move_leader("t", 0, 1)
    cluster.stop_broker(0)
    assert future.get(IN_PROCESS_BOUND).offset == 1
    assert [r.value for r in cluster.records("t", 0)] == [b"first", b"second"]
    assert produce_requests(cluster)[-1] == 1


def test_a_leader_elected_after_its_predecessor_died_is_found(fake_cluster, producer_of):
    # The order of a real failover: the leader dies, the metadata still names it until the
    # controller elects another one (~100 ms later). Each failed connection attempt asks
    # for metadata again (Kafka's NetworkClient rule), so the new leader is found.
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    producer = producer_of(cluster)
    assert producer.send("t", b"first").get(IN_PROCESS_BOUND).offset == 0
    before = len(cluster.requests)
    cluster.stop_broker(0)
    future = producer.send("t", b"second")
    wait_for(lambda: "METADATA" in [name for _, name, _ in cluster.requests[before:]],
               "a metadata refresh after the death (it still names broker 0)")
    cluster.move_leader("t", 0, 1)
    assert future.get(IN_PROCESS_BOUND).offset == 1
    assert [r.value for r in cluster.records("t", 0)] == [b"first", b"second"]


def test_a_leader_that_appended_then_died_before_answering_gives_a_duplicate(fake_cluster,
                                                                            producer_of):
    # Without idempotence the outcome of a request whose broker died is unknown, and the
    # retry writes the batch again: at least once, as Kafka's producer.
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    producer = producer_of(cluster)
    assert producer.send("t", b"first").get(IN_PROCESS_BOUND).offset == 0
    cluster.brokers[0].tamper = lambda frame: None  # from now on: appends, never answers
    future = producer.send("t", b"once?")
    wait_for(lambda: len(cluster.records("t", 0)) == 2, "the append on broker 0")
    cluster.move_leader("t", 0, 1)
    cluster.stop_broker(0)
    assert future.get(IN_PROCESS_BOUND).offset == 2
    assert [r.value for r in cluster.records("t", 0)] == [b"first", b"once?", b"once?"]


def test_a_hung_leader_is_given_up_after_the_request_timeout(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    producer = producer_of(cluster, request_timeout_ms=200, delivery_timeout_ms=5000)
    assert producer.send("t", b"first").get(IN_PROCESS_BOUND).offset == 0
    cluster.brokers[0].paused.set()  # alive, reads nothing: never answers
    future = producer.send("t", b"second")
    wait_for(lambda: producer._sender._in_flight, "the request in flight")
    cluster.move_leader("t", 0, 1)
    try:
        assert future.get(IN_PROCESS_BOUND).offset == 1
    finally:
        cluster.brokers[0].paused.clear()
    assert [r.value for r in cluster.records("t", 0)] == [b"first", b"second"]


def test_an_idempotent_batch_in_flight_to_a_hung_leader_goes_to_the_new_one_at_once(
        fake_cluster, producer_of):
    # Beyond Kafka: the new leader's publication brings a metadata refresh, the batch is
    # taken out of the hung request and sent to broker 1 long before request_timeout_ms;
    # the hung broker's late answer is ignored and the batch completes once.
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    producer = producer_of(cluster, acks="all", enable_idempotence=True,
                           request_timeout_ms=600_000, delivery_timeout_ms=1_200_000)
    assert producer.send("t", b"first").get(IN_PROCESS_BOUND).offset == 0
    client = producer._sender._client
    cluster.brokers[0].paused.set()  # alive, reads nothing
    completions = []
    try:
        future = producer.send("t", b"second")
        future.add_callback(completions.append)
        wait_for(lambda: producer._sender._in_flight, "the request in flight")
        cluster.fence_broker(0)  # the controller's order: fence the hung broker, elect
        cluster.move_leader("t", 0, 1)
        assert future.get(IN_PROCESS_BOUND).offset == 1
        assert client.in_flight_count(0) == 1  # the old request is still unanswered
    finally:
        cluster.brokers[0].paused.clear()
    wait_for(lambda: client.in_flight_count(0) == 0, "the hung broker's late answer")
    assert producer.send("t", b"third").get(IN_PROCESS_BOUND).offset == 2
    assert [r.value for r in cluster.records("t", 0)] == [b"first", b"second", b"third"]
    assert [c.offset for c in completions] == [1]


def test_without_idempotence_a_batch_in_flight_to_a_hung_leader_waits_for_its_answer(
        fake_cluster, producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    producer = producer_of(cluster, request_timeout_ms=600_000, delivery_timeout_ms=1_200_000)
    assert producer.send("t", b"first").get(IN_PROCESS_BOUND).offset == 0
    cluster.brokers[0].paused.set()
    try:
        future = producer.send("t", b"second")
        wait_for(lambda: producer._sender._in_flight, "the request in flight")
        before = len(cluster.requests)
        cluster.fence_broker(0)
        cluster.move_leader("t", 0, 1)
        client = producer._sender._client
        client.cluster.request_update()  # a refresh, as idempotence would have asked for
        wait_for(lambda: "METADATA" in [n for _, n, _ in cluster.requests[before:]],
                   "a refresh naming broker 1")
        time.sleep(0.2)
        assert not future.is_done and produce_requests(cluster, before) == []
    finally:
        cluster.brokers[0].paused.clear()
    assert future.get(IN_PROCESS_BOUND).offset == 1  # the old leader's answer (a resend
    # could have written it twice)


def test_sends_from_threads_while_the_leader_moves_lose_nothing(fake_cluster, producer_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("t", leaders=[0])
    producer = producer_of(cluster, linger_ms=2, max_in_flight_requests_per_connection=1)
    sent = {name: [b"%s-%03d" % (name, i) for i in range(200)] for name in (b"a", b"b")}
    futures = []

    def send(name):
        futures.extend(producer.send("t", value) for value in sent[name])
    threads = [threading.Thread(target=send, args=(name,)) for name in sent]
    for thread in threads:
        thread.start()
    cluster.move_leader("t", 0, 1)
    for thread in threads:
        thread.join(IN_PROCESS_BOUND)
    producer.flush(IN_PROCESS_BOUND)
    assert sorted(f.get(0).offset for f in futures) == list(range(400))
    stored = [r.value for r in cluster.records("t", 0)]
    for name, values in sent.items():  # each thread's records once, in its order
        assert [v for v in stored if v.startswith(name)] == values
