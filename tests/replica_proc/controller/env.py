"""``Env``: the controller tests' world — a data directory, a metadata page, brokers played
by flock registrations held in the test process (flock locks belong to open file
descriptions, so each registration is a broker of its own) and controllers. The ``env``
fixture (conftest.py) makes one per test and closes it."""
from __future__ import annotations

from cluster.config import BrokerConfig
from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import register_broker
from cluster.metadata.page import MetadataPage
from replica_proc.controller.controller import Controller
from shm_ring.naming import cleanup_stale, list_objects


class Env:
    """A data directory, a metadata page, brokers (registrations) and controllers."""

    def __init__(self, path, page_size=1024 * 1024):
        self.data_dir = str(path / "data")
        self.cluster_id = dd.ensure_cluster_id(self.data_dir)
        self.page = MetadataPage.create(self.cluster_id, size=page_size)
        self.brokers = {}
        self.controllers = []
        self.now = 0.0

    def start_broker(self, broker_id, state=dd.STATE_SERVING):
        registration = register_broker(self.data_dir, broker_id, self.cluster_id)
        registration.set_state(state)
        self.brokers[broker_id] = registration
        return registration

    def stop_broker(self, broker_id):
        self.brokers.pop(broker_id).close()

    def controller(self, broker_id=0, **config):
        config = {k.replace("_", "."): v for k, v in config.items()}
        controller = Controller(self.data_dir, self.cluster_id, broker_id,
                                BrokerConfig(config, data_dir=self.data_dir), self.page)
        self.controllers.append(controller)
        return controller

    def poll(self, controller):
        """A poll after the interval has passed; the image on the page."""
        self.now += 1.0
        controller.poll(self.now)
        return self.page.read()

    def close(self):
        for controller in self.controllers:
            controller.close()
        for registration in self.brokers.values():
            registration.close()
        self.page.unlink()
        self.page.close()
        cleanup_stale(self.cluster_id)
        assert list_objects(self.cluster_id) == []
