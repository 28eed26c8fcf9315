"""InterBrokerChannel (the broker's requests to another broker: AlterPartition and
CreateTopics to the controller, WriteTxnMarkers to partition leaders, Fetch to leaders).

Over real rings: a request in flight to a broker that dies without answering fails
(``on_answer(None)``) from ``poll`` alone, so its sender sends it again (a coordinator's
markers used to wait forever for a leader SIGKILLed after it read them: the transaction
never completed). Without processes, against a fake connection: answers matched by
correlation id (which wraps within the int32), a lost connection or a moved destination
fails what is in flight."""
from __future__ import annotations

import os
import signal
import time

import pytest

from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.inter_broker_channel import InterBrokerChannel
from shm_ring import Listener, connect
from shm_ring.wakeup import WaitPolicy
from tests.support.bounds import BOUND
from tests.support.fake_connection import FakeConnection
from tests.support.processes import CTX

FAST = WaitPolicy(spin=20, poll_interval=0.02)



def _silent_broker(cluster_id, pipe):
    """Broker 1: accepts connections and reads requests, never answers."""
    listener = Listener(cluster_id, 1, policy=FAST, liveness_interval=0.02)
    pipe.send("listening")
    deadline = time.monotonic() + BOUND * 2
    while time.monotonic() < deadline:
        listener.wait(0.02)
        listener.accept_pending()
        for connection in listener.ready():
            while connection.recv() is not None:
                pipe.send("read a request")
            connection.release()


@pytest.mark.multiprocess
def test_a_request_in_flight_to_a_broker_that_died_fails_from_poll(cluster_id, spawn):
    parent, child = CTX.Pipe()
    broker = spawn(_silent_broker, cluster_id, child)
    assert parent.poll(BOUND) and parent.recv() == "listening"
    channel = InterBrokerChannel(
        cluster_id, 0, peer="partition leader",
        connector=lambda *args, **kwargs: connect(*args, **kwargs, policy=FAST))
    answers = []
    try:
        request = protocol.request_class(ApiKey.API_VERSIONS, 0)()
        assert channel.send(1, request, answers.append)
        assert parent.poll(BOUND) and parent.recv() == "read a request"
        channel.poll()
        assert answers == []  # no answer yet, the broker lives
        os.kill(broker.pid, signal.SIGKILL)
        broker.join(BOUND)
        deadline = time.monotonic() + BOUND
        while not answers:
            assert time.monotonic() < deadline, "the request to a dead broker never failed"
            channel.poll()
            time.sleep(0.01)
        assert answers == [None]
        assert channel.destination is None  # the connection was dropped
    finally:
        channel.close()
    with Listener(cluster_id, 1):  # takes the dead broker's listener over, and unlinks it
        pass


def fake_channel():
    brokers = {}

    def connector(cluster_id, broker_id, timeout, capacity):
        brokers[broker_id] = FakeConnection()
        return brokers[broker_id]
    return InterBrokerChannel("c" * 22, 0, connector=connector), brokers


API_VERSIONS = protocol.request_class(ApiKey.API_VERSIONS, 0)


def test_answers_are_matched_by_correlation_id_which_wraps_within_the_int32():
    channel, brokers = fake_channel()
    channel._correlation_id = protocol.MAX_CORRELATION_ID - 1  # as after 2^31 - 2 requests
    answers = []
    for n in range(3):
        assert channel.send(1, API_VERSIONS(), lambda r, n=n: answers.append((n, r)))
    broker = brokers[1]
    assert [c for c, _ in broker.requests] == [protocol.MAX_CORRELATION_ID, 0, 1]
    assert channel.in_flight == 3
    for correlation_id in (0, protocol.MAX_CORRELATION_ID, 1):  # answered out of order
        broker.answer(correlation_id, protocol.api_versions_response(0))
    channel.poll()
    assert [n for n, _ in answers] == [1, 0, 2]
    assert all(r.error_code == 0 for _, r in answers) and channel.in_flight == 0


def test_a_lost_connection_or_a_moved_destination_fails_what_is_in_flight():
    channel, brokers = fake_channel()
    answers = []
    assert channel.send(1, API_VERSIONS(), answers.append)
    assert not channel.send(0, API_VERSIONS(), answers.append)  # never to itself
    assert channel.send(2, API_VERSIONS(), answers.append)  # the controller moved
    assert answers == [None] and brokers[1].closed and channel.destination == 2
    # an answer no request in flight has: the connection is dropped
    brokers[2].answer(999, protocol.api_versions_response(0))
    channel.poll()
    assert answers == [None, None] and brokers[2].closed and not channel.connected
    assert channel.send(2, API_VERSIONS(), answers.append)  # connects again
    brokers[2].died = True
    channel.poll()
    assert answers == [None, None, None] and channel.destination is None
