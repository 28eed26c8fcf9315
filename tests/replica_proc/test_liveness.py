"""Broker liveness and controlled shutdown with real broker processes.

Three brokers (``python -m replica_proc``, broker 0 the controller) with a short session
timeout; topic ``r`` (3 partitions, RF 3) whose ISRs the test fills through AlterPartition
(it plays each leader), so a follower can take over. A SIGSTOPped leader is fenced by its
stale heartbeat — its process and lock still there — and its partition gets a new leader;
after SIGCONT it is alive again. A SIGTERMed leader keeps serving until the controller has
moved its leaderships, then exits. A broker alone does not wait for nothing.
"""
from __future__ import annotations

import datetime
import os
import signal

import pytest

from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import broker_is_alive
from cluster.metadata.page import MetadataPage
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.alter_partition_manager import AlterPartitionManager
from replica_proc.broker_metadata import BrokerMetadata
from replica_proc.controller_channel import ControllerChannel
from shm_ring import cleanup_stale, list_objects
from tests.support.broker import BrokerProcess, Client, create_topics_request, wait_for

pytestmark = pytest.mark.multiprocess

OVERRIDES = ["broker.session.timeout.ms=1500", "broker.heartbeat.interval.ms=100"]
"""A session timeout short enough for a test, still fifteen heartbeats long."""


class Trio:
    """Three broker processes of one data directory, the page, and a channel to the
    controller through which the test sends AlterPartition as the partitions' leaders."""

    def __init__(self, data_dir):
        self.data_dir = data_dir
        self.cluster_id = dd.ensure_cluster_id(data_dir)
        self.page = MetadataPage.create(self.cluster_id)
        self.brokers = [BrokerProcess(data_dir, b, overrides=OVERRIDES, controller=True)
                        for b in range(3)]
        self.channel = ControllerChannel(self.cluster_id, broker_id=99)
        self.metadata = BrokerMetadata(self.page, self.cluster_id)

    def image(self):
        return self.page.read()

    def start(self):
        self.brokers[0].start()
        wait_for(lambda: self.image().controller_id == 0, "broker 0 to be the controller")
        for broker in self.brokers[1:]:
            broker.start()
        wait_for(lambda: self.image().live_brokers() == [0, 1, 2], "three live brokers")
        m = protocol.request_module(ApiKey.CREATE_TOPICS, 4)
        client = Client(self.cluster_id, 0)
        try:
            response = client.call(m.CreateTopicsRequest(topics=(m.CreatableTopic(
                name="r", num_partitions=3, replication_factor=3, assignments=(),
                configs=()),), timeout=datetime.timedelta(seconds=10), validate_only=False))
        finally:
            client.close()
        assert response.topics[0].error_code == 0
        self.fill_isrs()

    def fill_isrs(self):
        """Every partition of r with all its replicas in the ISR, asked as its leader."""
        def known():
            self.metadata.refresh()
            return "r" in self.metadata.image.topics
        wait_for(known, "topic r in the metadata")
        answers = []
        managers = []
        for state in self.metadata.image.topics["r"].partitions:
            manager = AlterPartitionManager(state.leader, self.metadata, None, self.channel,
                                            list, lambda: 0.0)
            assert manager.submit("r", state.partition, state.leader_epoch,
                                  state.partition_epoch, state.replicas,
                                  lambda code, new: answers.append(code))
            managers.append(manager)

        def answered():
            self.channel.poll()
            for manager in managers:
                manager.poll()
            return not any(manager.busy for manager in managers)
        wait_for(answered, "the ISR changes to be answered")
        assert answers == [0, 0, 0]
        assert all(len(p.isr) == 3 for p in self.image().topics["r"].partitions)

    def led_elsewhere(self):
        """A partition of r led by a broker that is not the controller."""
        image = self.image()
        return next(p for p in image.topics["r"].partitions if p.leader != image.controller_id)

    def close(self):
        try:
            self.channel.close()
            for broker in self.brokers:
                if broker.popen is not None and broker.popen.poll() is None:
                    os.kill(broker.pid, signal.SIGCONT)
                broker.kill()
        finally:
            self.page.unlink()
            self.page.close()
            cleanup_stale(self.cluster_id)


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
