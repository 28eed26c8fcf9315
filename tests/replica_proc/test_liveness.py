"""Broker liveness and controlled shutdown with real broker processes.

Three brokers (``python -m replica_proc``, broker 0 the controller) with a short session
timeout; topic ``r`` (3 partitions, RF 3) whose ISRs the test fills through AlterPartition
(it plays each leader), so a follower can take over. A SIGSTOPped leader is fenced by its
stale heartbeat — its process and lock still there — and its partition gets a new leader;
after SIGCONT it is alive again. A SIGTERMed leader keeps serving until the controller has
moved its leaderships, then exits. A broker alone does not wait for nothing.
"""
from __future__ import annotations

import os
import signal

import pytest

from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import broker_is_alive
from cluster.metadata.page import MetadataPage
from shm_ring import cleanup_stale, list_objects
from tests.support.broker import BrokerProcess, Client, create_topics_request
from tests.support.trio import Trio
from tests.support.waits import wait_for

pytestmark = pytest.mark.multiprocess


@pytest.fixture
def trio(tmp_path):
    cluster = Trio(tmp_path)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
    assert list_objects(cluster.cluster_id) == []


def test_a_stopped_leader_is_fenced_by_its_heartbeat_and_returns_after_sigcont(trio):
    state = trio.led_elsewhere()
    stopped = trio.brokers[state.leader]
    os.kill(stopped.pid, signal.SIGSTOP)

    def failed_over():
        image = trio.image()
        now = image.partition("r", state.partition)
        return not image.brokers[state.leader].alive and now.leader not in (-1, state.leader)
    wait_for(failed_over, f"a new leader of r-{state.partition}")
    # fenced by the heartbeat: the process still holds its lock and says it serves
    assert broker_is_alive(trio.data_dir, state.leader)
    assert (dd.read_broker_state(trio.data_dir, state.leader) or {}).get("state") == "serving"
    moved = trio.image().partition("r", state.partition)
    assert state.leader not in moved.isr and moved.leader_epoch == state.leader_epoch + 1
    assert "fenced, no heartbeat" in trio.brokers[0].log()

    os.kill(stopped.pid, signal.SIGCONT)
    wait_for(lambda: trio.image().brokers[state.leader].alive,
             f"broker {state.leader} to be alive again")
    assert stopped.popen.poll() is None


def test_a_sigtermed_leader_hands_over_its_leaderships_before_it_exits(trio):
    state = trio.led_elsewhere()
    leaving = trio.brokers[state.leader]
    assert leaving.stop() == 0
    image = trio.image()  # read after the exit: the move was published before it
    assert not image.brokers[state.leader].alive
    moved = image.partition("r", state.partition)
    assert moved.leader not in (-1, state.leader)
    assert image.partitions_led_by(state.leader) == []
    log = leaving.log()
    assert "waiting up to 15.0 s for its leaderships to move" in log
    assert "leads no partition another replica could lead; closing" in log
    assert "controlled shutdown timed out" not in log


def test_a_broker_alone_does_not_wait_to_hand_over(tmp_path):
    cluster_id = dd.ensure_cluster_id(tmp_path)
    page = MetadataPage.create(cluster_id)
    broker = BrokerProcess(tmp_path, 0, controller=True)
    client = None
    try:
        broker.start()
        wait_for(lambda: page.read().live_brokers() == [0], "broker 0 alive")
        client = Client(cluster_id, 0)
        assert client.call(create_topics_request({"alone": (2, {})})).topics[0].error_code == 0
        assert page.read().partitions_led_by(0) != []
        client.close()
        client = None
        assert broker.stop() == 0
        log = broker.log()
        assert "leads no partition another replica could lead; closing" in log
        assert "controlled shutdown timed out" not in log
    finally:
        if client is not None:
            client.close()
        broker.kill()
        page.unlink()
        page.close()
        cleanup_stale(cluster_id)
    assert list_objects(cluster_id) == []
