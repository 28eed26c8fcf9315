"""ControllerChannel (the broker's requests to another broker: AlterPartition and
CreateTopics to the controller, WriteTxnMarkers to partition leaders) over real rings: a
request in flight to a broker that dies without answering fails (``on_answer(None)``)
from ``poll`` alone, so its sender sends it again (a coordinator's markers used to wait
forever for a leader SIGKILLed after it read them: the transaction never completed)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.controller_channel import ControllerChannel
from shm_ring import Listener, connect
from shm_ring.wakeup import WaitPolicy
from tests.support.bounds import BOUND
from tests.support.processes import CTX

FAST = WaitPolicy(spin=20, poll_interval=0.02)

pytestmark = pytest.mark.multiprocess


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


def test_a_request_in_flight_to_a_broker_that_died_fails_from_poll(cluster_id, spawn):
    parent, child = CTX.Pipe()
    broker = spawn(_silent_broker, cluster_id, child)
    assert parent.poll(BOUND) and parent.recv() == "listening"
    channel = ControllerChannel(
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
        assert channel.controller_id is None  # the connection was dropped
    finally:
        channel.close()
    with Listener(cluster_id, 1):  # takes the dead broker's listener over, and unlinks it
        pass
