"""``Trio``: three broker processes (``python -m replica_proc``) of one data directory, broker
0 the controller, a short session timeout, and topic ``r`` (3 partitions, RF 3) whose ISRs
are filled through AlterPartition (the test plays each leader), so any replica can take
over; the liveness and controller-failover tests share it. ``close()`` stops every process
(SIGCONT first, for a stopped one) and unlinks the cluster's shared memory."""
from __future__ import annotations

import datetime
import os
import signal

from cluster.metadata import data_dir as dd
from cluster.metadata.page import MetadataPage
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.alter_partition_manager import AlterPartitionManager
from replica_proc.broker_metadata import BrokerMetadata
from replica_proc.controller_channel import ControllerChannel
from shm_ring import cleanup_stale
from tests.support.broker import BrokerProcess, Client
from tests.support.waits import wait_for

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
