"""cluster.client.kafka_client: bootstrap, connections, correlation ids, in-order responses,
timeouts, broker failures and reconnection, the metadata cache — against fake brokers (threads)."""
from __future__ import annotations

import datetime
import logging
import os
import threading
import time

import pytest

from cluster.client.future import Future
from cluster.client.kafka_client import (
    API_VERSIONS,
    KafkaClient,
    Wakeup,
    locate_cluster,
    ring_capacity_for,
)
from cluster.client.metadata import ClusterMetadata, TopicMetadata
from cluster.config import AdminClientConfig, ProducerConfig
from cluster.errors import (
    CorrelationIdError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoBrokersAvailable,
    RequestTimedOutError,
)
from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import register_broker
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from shm_ring import ring_descriptor as rd
from shm_ring.connection import DEFAULT_CAPACITY
from tests.support.bounds import IN_PROCESS_BOUND
from tests.support.fake_broker import FakeCluster

META = protocol.request_module(ApiKey.METADATA, API_VERSIONS[ApiKey.METADATA])


def config(cluster, **overrides):
    settings = dict(bootstrap_servers=cluster.data_dir, request_timeout_ms=3000,
                    reconnect_backoff_ms=5, reconnect_backoff_max_ms=50, retry_backoff_ms=5,
                    ringlog_park_timeout_ms=10)
    settings.update(overrides)
    return AdminClientConfig(**settings)


def metadata_request(*topics):
    return META.MetadataRequest(
        topics=tuple(META.MetadataRequestTopic(name=t) for t in topics),
        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False)


@pytest.fixture
def client_of():
    made = []

    def make(cluster, **overrides):
        client = KafkaClient(config(cluster, **overrides))
        made.append(client)
        return client
    yield make
    for client in made:
        client.close()


# -- bootstrap ------------------------------------------------------------------------------------

def test_bootstrap_servers_must_name_a_data_directory(tmp_path):
    with pytest.raises(NoBrokersAvailable, match="localhost:9092"):
        locate_cluster(("localhost:9092", str(tmp_path)))


def stopped_data_dir(path, brokers):
    """A data directory of ``brokers`` brokers, none of them running (no lock held)."""
    cluster_id = dd.ensure_cluster_id(path)
    for broker_id in range(brokers):
        os.makedirs(dd.broker_dir(path, broker_id))
        dd.ensure_broker_meta(path, broker_id, cluster_id)
    return cluster_id


def test_a_stopped_cluster_says_how_to_start_it_at_once(tmp_path):
    cluster_id = stopped_data_dir(tmp_path / "my data", brokers=3)
    started = time.monotonic()
    with pytest.raises(NoBrokersAvailable) as raised:
        KafkaClient(AdminClientConfig(bootstrap_servers=str(tmp_path / "my data"))
                    ).wait_for_metadata(IN_PROCESS_BOUND)
    assert time.monotonic() - started < 2.0  # no retry loop: nothing could answer
    message = str(raised.value)
    assert "\n" not in message
    assert f"cluster {cluster_id} in {tmp_path / 'my data'} is not running" in message
    assert (f"ringlog cluster start --data-dir '{tmp_path / 'my data'}' --brokers 3 --detach"
            in message)


def test_a_broker_that_holds_its_lock_is_not_called_stopped(tmp_path):
    cluster_id = stopped_data_dir(tmp_path, brokers=1)
    with register_broker(tmp_path, 0, cluster_id):  # running, but not on any metadata page
        # (starting, say): tried again until the wait's timeout
        with pytest.raises(KafkaTimeoutError, match="can be reached") as raised:
            KafkaClient(AdminClientConfig(bootstrap_servers=str(tmp_path))
                        ).wait_for_metadata(0.3)
    assert "ringlog cluster start" not in str(raised.value)


def test_bootstrap_reads_the_cluster_id_and_live_brokers_from_the_page(fake_cluster, client_of):
    cluster = fake_cluster(brokers=3)
    cluster.stop_broker(1)
    client = client_of(cluster)
    assert client.cluster_id == cluster.cluster_id
    assert client.bootstrap_brokers() == [0, 2]
    assert not client.broker_alive(1)


def test_first_metadata_fills_the_cache(fake_cluster, client_of):
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("logs", 3)
    client = client_of(cluster)
    client.wait_for_metadata(IN_PROCESS_BOUND, all_topics=True)
    meta = client.cluster
    assert sorted(meta.brokers) == [0, 1]
    assert meta.controller_id == 0
    assert meta.partitions_for_topic("logs") == {0, 1, 2}
    assert [meta.leader_for("logs", p) for p in range(3)] == [0, 1, 0]
    assert meta.leader_for("logs", 7) == -1
    assert meta.version == 1


def test_a_connection_starts_with_api_versions(fake_cluster, client_of):
    cluster = fake_cluster(brokers=1)
    client = client_of(cluster)
    client.wait_for_metadata(IN_PROCESS_BOUND)
    assert [name for _, name, _ in cluster.requests] == ["API_VERSIONS", "METADATA"]


# -- requests and responses -----------------------------------------------------------------------

def test_pipelined_requests_complete_in_order_with_rising_correlation_ids(fake_cluster, client_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("a")
    cluster.create_topic("b")
    client = client_of(cluster)
    client.wait_for_metadata(IN_PROCESS_BOUND)  # no refresh of its own will be in flight below
    names = ["a", "b", "a", "missing", "b"]
    futures = [client.send(0, metadata_request(name)) for name in names]
    completed = []
    for index, future in enumerate(futures):
        future.add_callback(lambda response, i=index: completed.append(i))
    client.poll_until(futures[-1], IN_PROCESS_BOUND)
    assert completed == [0, 1, 2, 3, 4]
    assert [f.value.topics[0].name for f in futures] == names
    assert futures[3].value.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert client.in_flight_count() == 0


def test_request_returns_the_decoded_response(fake_cluster, client_of):
    cluster = fake_cluster(brokers=2)
    client = client_of(cluster)
    response = client.request(1, metadata_request())
    assert response.cluster_id == cluster.cluster_id
    assert [b.node_id for b in response.brokers] == [0, 1]


def test_a_request_without_response_completes_when_written(fake_cluster, client_of):
    cluster = fake_cluster(brokers=1)
    client = client_of(cluster)
    future = client.send(0, metadata_request(), expect_response=False)
    assert future.succeeded() and future.value is None
    assert client.in_flight_count(0) == 0


def test_a_request_longer_than_the_ring_is_carried_in_fragments(fake_cluster, client_of):
    cluster = fake_cluster(brokers=1)
    client = client_of(cluster)
    m = protocol.request_module(ApiKey.PRODUCE, API_VERSIONS[ApiKey.PRODUCE])
    request = m.ProduceRequest(
        transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=1),
        topic_data=(m.TopicProduceData(name="t", partition_data=(
            m.PartitionProduceData(index=0, records=bytes(DEFAULT_CAPACITY)),)),))
    response = client.request(0, request)  # answered (the bytes are no batch: an error)
    assert [p.index for t in response.responses for p in t.partition_responses] == [0]
    assert client.connected(0)
    assert client.request(0, metadata_request()) is not None


def test_a_metadata_response_longer_than_the_ring_is_received(fake_cluster):
    cluster = fake_cluster(brokers=1, auto_create=False)
    cluster.create_topic("wide", partitions=400)
    client = KafkaClient(config(cluster), ring_capacity=1024)  # frames of 496 bytes
    try:
        response = client.request(0, metadata_request("wide", *(f"absent-{n}" for n in
                                                                range(100))))
        assert len(protocol.encode_request(metadata_request(*(f"absent-{n}" for n in
                                                              range(100))), 1, "c")) > 496
        wide = next(t for t in response.topics if t.name == "wide")
        assert sorted(p.partition_index for p in wide.partitions) == list(range(400))
        client.wait_for_metadata(IN_PROCESS_BOUND, all_topics=True)
        assert len(client.cluster.partitions_for_topic("wide")) == 400
    finally:
        client.close()


def test_unanswered_request_times_out_and_closes_the_connection(fake_cluster, client_of):
    cluster = fake_cluster(brokers=1)
    client = client_of(cluster, request_timeout_ms=200)
    client.wait_for_metadata(IN_PROCESS_BOUND)
    cluster.brokers[0].paused.set()
    future = client.send(0, metadata_request())
    client.poll_until(future, IN_PROCESS_BOUND)
    with pytest.raises(RequestTimedOutError, match="broker 0 did not answer METADATA"):
        future.get(0)
    assert not client.connected(0)
    assert client.cluster.need_update
    cluster.brokers[0].paused.clear()
    assert client.request(0, metadata_request()).controller_id == 0
    assert client.connected(0)


def test_wakeup_wait_ends_on_set_and_blocks_again_after_clear():
    wakeup = Wakeup()

    def waiter(done):
        wakeup.wait(IN_PROCESS_BOUND * 60)
        done.set()
    for _ in range(2):  # the second round checks that clear() closed it again
        done = threading.Event()
        threading.Thread(target=waiter, args=(done,), daemon=True).start()
        assert not done.wait(0.05)  # not set: the wait blocks
        wakeup.set()
        assert done.wait(IN_PROCESS_BOUND), "set() did not end the wait"
        assert wakeup.is_set() and not wakeup.is_urgent()
        wakeup.set()  # twice is harmless
        wakeup.wait(IN_PROCESS_BOUND * 60)  # still set until cleared: no wait at all
        wakeup.clear()
        assert not wakeup.is_set()


def test_an_urgent_wakeup_from_another_thread_ends_the_wait_for_a_response(fake_cluster, client_of):
    cluster = fake_cluster(brokers=1)
    # Parks for up to 60 s at a time: only the wake-up can end the wait within the bound.
    client = client_of(cluster, request_timeout_ms=60_000, ringlog_park_timeout_ms=60_000)
    client.wait_for_metadata(IN_PROCESS_BOUND)
    cluster.brokers[0].paused.set()
    future = client.send(0, metadata_request())
    wakeup = Wakeup()
    waker = threading.Timer(0.05, wakeup.set, kwargs={"urgent": True})
    # Should the wake-up be missed, the answer ends the wait instead, and the poll says so.
    safety = threading.Timer(IN_PROCESS_BOUND, cluster.brokers[0].paused.clear)
    waker.start()
    safety.start()
    try:
        assert client.poll(IN_PROCESS_BOUND * 60, wakeup=wakeup) == 0  # back with nothing completed
    finally:
        waker.cancel()
        safety.cancel()
    assert wakeup.is_set() and wakeup.is_urgent() and wakeup.waiting_on is None
    assert not future.is_done and client.in_flight_count(0) == 1
    wakeup.clear()
    cluster.brokers[0].paused.clear()
    client.poll_until(future, IN_PROCESS_BOUND)
    assert future.get(0).controller_id == 0


def test_correlation_id_mismatch_fails_the_connection(fake_cluster, client_of):
    cluster = fake_cluster(brokers=1)
    client = client_of(cluster)
    client.wait_for_metadata(IN_PROCESS_BOUND)

    def wrong_id(frame):
        tampered = bytearray(frame)
        tampered[4:8] = (999_999).to_bytes(4, "big")
        return bytes(tampered)
    cluster.brokers[0].tamper = wrong_id
    future = client.send(0, metadata_request())
    client.poll_until(future, IN_PROCESS_BOUND)
    with pytest.raises(CorrelationIdError, match="answered correlation id 999999"):
        future.get(0)
    assert not client.connected(0)


def test_garbage_response_is_a_protocol_error(fake_cluster, client_of):
    cluster = fake_cluster(brokers=1)
    client = client_of(cluster)
    client.wait_for_metadata(IN_PROCESS_BOUND)
    cluster.brokers[0].tamper = lambda frame: frame[:8] + b"\xff" * 3
    future = client.send(0, metadata_request())
    client.poll_until(future, IN_PROCESS_BOUND)
    assert future.failed()
    assert not client.connected(0)


# -- broker failures ------------------------------------------------------------------------------

def test_broker_going_away_fails_requests_in_flight_then_reconnects(fake_cluster, client_of,
                                                                     caplog):
    cluster = fake_cluster(brokers=2)
    client = client_of(cluster)
    client.wait_for_metadata(IN_PROCESS_BOUND)
    assert client.request(0, metadata_request()) is not None
    cluster.brokers[0].paused.set()
    future = client.send(0, metadata_request())
    stopper = threading.Thread(target=cluster.stop_broker, args=(0,))
    stopper.start()
    client.poll_until(future, IN_PROCESS_BOUND)
    stopper.join(IN_PROCESS_BOUND)
    with pytest.raises(KafkaConnectionError, match="Connection to node 0 was lost: broker 0 "
                                                   "closed it"):
        future.get(0)
    # one WARNING in Kafka's words; the rings' and shared memory's names only at DEBUG
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "Connection to node 0 was lost: broker 0 closed it (it is stopping)"]
    assert future.retriable()
    assert not client.connected(0)
    # While the page says it is down, it is not even tried; another broker answers.
    assert not client.is_ready(0)
    client.wait_for_metadata(IN_PROCESS_BOUND)
    assert sorted(client.cluster.brokers) == [1]
    cluster.start_broker(0)
    client.wait_for_metadata(IN_PROCESS_BOUND)
    assert client.request(0, metadata_request()).controller_id == 0


def test_sending_to_a_broker_that_never_ran_fails_the_future(fake_cluster, client_of):
    cluster = fake_cluster(brokers=1)
    client = client_of(cluster)
    future = client.send(5, metadata_request())
    with pytest.raises(KafkaConnectionError, match="broker 5 is not alive on the metadata"):
        future.get(0)


def test_metadata_refresh_fails_when_no_broker_is_live(fake_cluster, client_of):
    cluster = fake_cluster(brokers=1)
    client = client_of(cluster)
    client.wait_for_metadata(IN_PROCESS_BOUND)
    cluster.stop_broker(0)
    with pytest.raises((NoBrokersAvailable, KafkaConnectionError)):
        client.wait_for_metadata(IN_PROCESS_BOUND)


def test_wait_for_metadata_times_out_when_nothing_answers(fake_cluster, client_of):
    cluster = fake_cluster(brokers=1)
    client = client_of(cluster, request_timeout_ms=5000)
    client.wait_for_metadata(IN_PROCESS_BOUND)
    cluster.brokers[0].paused.set()
    with pytest.raises(KafkaTimeoutError, match="not updated within 0.2 s"):
        client.wait_for_metadata(0.2)
    cluster.brokers[0].paused.clear()


def test_a_cluster_started_again_is_found_through_its_new_page(tmp_path):
    first = FakeCluster(tmp_path / "data", brokers=1)
    client = KafkaClient(config(first))
    second = None
    try:
        assert client.request(0, metadata_request()).cluster_id == first.cluster_id
        first.stop_broker(0)  # the old page's last word: broker 0 is down
        first.close()  # the whole cluster goes away, its page with it
        second = FakeCluster(tmp_path / "data", brokers=1)
        assert second.cluster_id == first.cluster_id
        answered = None
        for _ in range(100):
            try:
                answered = client.request(0, metadata_request(), timeout=0.1)
                break
            except (KafkaConnectionError, KafkaTimeoutError):
                client.poll(0.01)
        assert answered is not None and answered.brokers[0].node_id == 0
    finally:
        client.close()
        if second is not None:
            assert second.close() == []


# -- the cache ------------------------------------------------------------------------------------

def test_waiters_wake_on_update_and_on_failure():
    cache = ClusterMetadata("c")
    ticket = cache.request_update()
    assert not cache.wait_for_update(ticket, 0.01)
    woke = []
    waiter = threading.Thread(target=lambda: woke.append(
        cache.wait_for_update(ticket, IN_PROCESS_BOUND)))
    waiter.start()
    cache.update_failed(KafkaConnectionError("down"), sent_for=cache.requested)
    waiter.join(IN_PROCESS_BOUND)
    assert woke == [True]
    assert isinstance(cache.last_error, KafkaConnectionError)
    assert cache.need_update  # a failed attempt leaves the request standing
    ticket = cache.request_update()
    cache.update({}, 3, {}, now=1.0, all_topics=True, sent_for=cache.requested)
    assert cache.wait_for_update(ticket, 0.01)
    assert cache.last_error is None and not cache.need_update and cache.controller_id == 3


def test_an_answer_already_in_flight_does_not_serve_a_later_request():
    cache = ClusterMetadata("c")
    in_flight = cache.requested          # a Metadata request goes out now...
    ticket = cache.request_update()      # ...then someone learns the broker list is stale
    cache.update({0: "old"}, 0, {}, now=1.0, all_topics=True, sent_for=in_flight)
    assert not cache.wait_for_update(ticket, 0.01)
    assert cache.need_update             # so the network thread asks again
    cache.update({1: "new"}, 1, {}, now=2.0, all_topics=True, sent_for=cache.requested)
    assert cache.wait_for_update(ticket, 0.01) and not cache.need_update
    assert cache.brokers == {1: "new"}


def test_topics_of_interest_forgetting_and_dropping_interest():
    cache = ClusterMetadata("c")
    cache.update({}, 0, {}, now=0.0, all_topics=True, sent_for=cache.requested)
    assert cache.add_topics(["a", "b"])
    assert cache.need_update
    assert not cache.add_topics(["a"])
    assert cache.topics_of_interest == {"a", "b"}
    cache.forget_topics(["a"])
    assert cache.topics_of_interest == {"b"}
    cache.update({}, 0, {"b": TopicMetadata("b", 0, False, [])}, now=1.0, all_topics=False,
                 sent_for=cache.requested)
    cache.drop_interest(["b"])
    assert cache.topics_of_interest == set() and "b" in cache.topics and not cache.need_update


def test_named_refresh_keeps_other_topics(fake_cluster, client_of):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("a")
    cluster.create_topic("b")
    client = client_of(cluster)
    client.wait_for_metadata(IN_PROCESS_BOUND, all_topics=True)
    assert set(client.cluster.topics) == {"a", "b"}
    client.cluster.add_topics(["a"])
    client.wait_for_metadata(IN_PROCESS_BOUND)
    assert set(client.cluster.topics) == {"a", "b"}
    assert client.cluster.version == 2


def test_auto_creation_is_asked_for_only_when_configured(fake_cluster, client_of):
    cluster = fake_cluster(brokers=1)
    client = client_of(cluster)
    client.cluster.add_topics(["fresh"])
    client.wait_for_metadata(IN_PROCESS_BOUND)
    assert client.cluster.topic("fresh").error.message == "UNKNOWN_TOPIC_OR_PARTITION"
    producer_side = KafkaClient(ProducerConfig(bootstrap_servers=cluster.data_dir,
                                               enable_idempotence=False))
    try:
        producer_side.cluster.add_topics(["fresh"])
        producer_side.wait_for_metadata(IN_PROCESS_BOUND)
        assert producer_side.cluster.topic("fresh").error.message == "LEADER_NOT_AVAILABLE"
        producer_side.wait_for_metadata(IN_PROCESS_BOUND)
        assert producer_side.cluster.partitions_for_topic("fresh") == {0}
    finally:
        producer_side.close()


def test_ring_capacity_grows_to_hold_the_largest_request():
    assert ring_capacity_for(1000) == DEFAULT_CAPACITY
    capacity = ring_capacity_for(1 << 20)
    assert rd.max_frame_length(capacity) >= 1 << 20
    assert rd.max_frame_length(capacity // 2) < 1 << 20


def test_a_metadata_refresh_tries_every_broker_before_giving_up(fake_cluster, client_of,
                                                                  monkeypatch):
    """Brokers 0 and 1 cannot be reached (SIGSTOPped: no accept) and their backoffs are
    over by the time both failed: the refresh still asks broker 2, not broker 0 again."""
    cluster = fake_cluster(brokers=3)
    client = client_of(cluster)
    real_send = client.send
    asked = []

    def send(node_id, request, expect_response=True):
        asked.append(node_id)
        if node_id in (0, 1):
            return Future().failure(KafkaConnectionError(f"broker {node_id} did not accept"))
        return real_send(node_id, request, expect_response)

    monkeypatch.setattr(client, "send", send)
    client.wait_for_metadata(IN_PROCESS_BOUND)
    assert asked == [0, 1, 2]


def test_a_metadata_wait_retries_failed_attempts_within_its_timeout(fake_cluster, client_of,
                                                                    monkeypatch):
    """On a loaded machine no broker may accept a connection within CONNECT_TIMEOUT: that
    attempt fails (NoBrokersAvailable, retriable) and the wait tries again until its own
    timeout, instead of giving up at once (the Spark source's planner did: issue 22)."""
    cluster = fake_cluster(brokers=2)
    cluster.create_topic("logs", 2)
    client = client_of(cluster)
    real_send = client.send
    refused = []

    def send(node_id, request, expect_response=True):
        if len(refused) < 4:  # both brokers, twice: two whole attempts fail
            refused.append(node_id)
            return Future().failure(KafkaConnectionError(f"broker {node_id} did not accept "
                                                         f"within 0.5 s"))
        return real_send(node_id, request, expect_response)

    monkeypatch.setattr(client, "send", send)
    with register_broker(cluster.data_dir, 0, cluster.cluster_id):  # a broker process runs
        client.wait_for_metadata(IN_PROCESS_BOUND, all_topics=True)
    assert sorted(refused) == [0, 0, 1, 1]
    assert client.cluster.partitions_for_topic("logs") == {0, 1}


def test_a_metadata_wait_that_keeps_failing_times_out_naming_the_last_failure(
        fake_cluster, client_of, monkeypatch):
    cluster = fake_cluster(brokers=1)
    client = client_of(cluster)
    monkeypatch.setattr(client, "send", lambda node_id, request, expect_response=True:
                        Future().failure(KafkaConnectionError(f"broker {node_id} did not "
                                                              f"accept within 0.5 s")))
    with register_broker(cluster.data_dir, 0, cluster.cluster_id):
        with pytest.raises(KafkaTimeoutError, match="not updated within 0.3 s: no broker of "
                                                    "cluster .* can be reached"):
            client.wait_for_metadata(0.3)
