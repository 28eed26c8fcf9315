"""Fixtures of the chaos tests that run ``ringlog chaos`` as a process: ``data_dir``, the
run's data directory, checked afterwards (the cluster stopped, no shared memory left)."""
from __future__ import annotations

import pytest

from cluster.metadata import data_dir as dd
from cluster.supervisor.supervisor import stop_cluster
from shm_ring.naming import list_objects


@pytest.fixture
def data_dir(tmp_path):
    """The run's data directory; afterwards its cluster is stopped (if a test started one,
    or the tool failed to stop its own) and none of its shared-memory objects may be left."""
    path = tmp_path / "data"
    yield path
    if path.is_dir():
        stop_cluster(path)
    cluster_id = dd.read_cluster_id(path) if path.is_dir() else None
    leftovers = list_objects(cluster_id) if cluster_id else []
    assert leftovers == [], f"shared memory left: {leftovers}"
