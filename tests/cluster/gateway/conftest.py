"""The cluster the gateway's tests share: three brokers (topics of 3 partitions, replication
factor 3, no initial rebalance delay) started once for the package, and one gateway
process serving them. Stopped in ``finally`` by pid; none of the cluster's shared-memory
objects may remain."""
from __future__ import annotations

import pytest

from cluster.supervisor.cluster import Cluster
from shm_ring.naming import list_objects
from tests.support.gateway import GatewayProcess


class Served:
    """The running cluster and its gateway."""

    def __init__(self, cluster, gateway):
        self.cluster = cluster
        self.gateway = gateway
        self.data_dir = cluster.data_dir

    @property
    def bootstrap(self):
        return self.gateway.bootstrap


@pytest.fixture(scope="package")
def served(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("gateway") / "data", brokers=3,
                      num_partitions=3, default_replication_factor=3,
                      group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1000,
                      transaction_state_log_replication_factor=3,
                      offsets_topic_replication_factor=3)
    gateway = None
    try:
        cluster.start()
        gateway = GatewayProcess(cluster.data_dir).start()
        yield Served(cluster, gateway)
    finally:
        if gateway is not None:
            gateway.stop()
        cluster.stop()
    assert list_objects(cluster.cluster_id) == []
