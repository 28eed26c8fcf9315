"""Producer ids and the idempotent producer on a real cluster: InitProducerId answered by
every broker from blocks the controller allocates, never an id twice across a controller
failover and a restart of the whole cluster; a produce whose response is lost (its leader
SIGSTOPped past request_timeout_ms, then continued) is retried and stored once."""
from __future__ import annotations

import datetime
import os
import signal
import time

import pytest
from kio.schema.errors import ErrorCode

from cluster import KafkaConsumer, KafkaProducer, TopicPartition
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from tests.support.bounds import BOUND
from tests.support.broker import Client
from tests.support.topics import create_topic

pytestmark = pytest.mark.multiprocess


def producer_id_from(cluster, broker_id):
    """A new producer id from broker ``broker_id`` (InitProducerId v1, no transactional
    id), asking again while it waits for its block."""
    request = protocol.request_class(ApiKey.INIT_PRODUCER_ID, 1)(
        transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60))
    client = Client(cluster.namespace, broker_id)
    try:
        deadline = time.monotonic() + BOUND
        while True:
            response = client.call(request)
            if response.error_code != ErrorCode.coordinator_load_in_progress:
                break
            assert time.monotonic() < deadline, "no block of producer ids in time"
            time.sleep(0.02)
    finally:
        client.close()
    assert (response.error_code, response.producer_epoch) == (ErrorCode.none, 0)
    return response.producer_id


def ids_from_every_broker(cluster, each=3):
    return [producer_id_from(cluster, b) for b in cluster.broker_ids for _ in range(each)]


def test_producer_ids_are_never_reused_across_failover_and_restart(e2e):
    cluster = e2e.cluster(brokers=3)
    first = ids_from_every_broker(cluster)
    assert len(set(first)) == len(first)
    controller = cluster.metadata().controller_id
    cluster.kill_broker(controller)
    cluster.wait_for_metadata(lambda i: i.controller_id not in (-1, controller))
    cluster.start_broker(controller)
    cluster.wait_for_metadata(lambda i: i.brokers[controller].alive)
    second = ids_from_every_broker(cluster)
    # the restarted broker's block came from the new controller, after every older block
    restarted = second[cluster.broker_ids.index(controller) * 3]
    assert restarted > max(first)
    cluster.stop()
    cluster.start()
    third = ids_from_every_broker(cluster)
    assert min(third) > max(first + second)
    every = first + second + third
    assert len(set(every)) == len(every)


def test_a_produce_whose_response_is_lost_is_stored_once(e2e):
    cluster = e2e.cluster(brokers=1)
    create_topic(cluster, "once", 1)
    pid = cluster.pids()[0]
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all",
                       enable_idempotence=True, linger_ms=0, request_timeout_ms=500,
                       retry_backoff_ms=20, reconnect_backoff_ms=20,
                       delivery_timeout_ms=BOUND * 1000) as producer:
        assert producer.send("once", b"first").get(BOUND).offset == 0
        os.kill(pid, signal.SIGSTOP)
        try:
            future = producer.send("once", b"second")
            time.sleep(1.0)  # written to the ring; no answer within request_timeout_ms
            assert not future.is_done
        finally:
            os.kill(pid, signal.SIGCONT)
        # the broker appends the first request, the retry is a duplicate of it
        assert future.get(BOUND).offset == 1
        assert producer.send("once", b"third").get(BOUND).offset == 2
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                       auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        tp = TopicPartition("once", 0)
        consumer.assign([tp])
        values = []
        deadline = time.monotonic() + BOUND
        while len(values) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                values += [r.value for r in records]
    assert values == [b"first", b"second", b"third"]
