"""Fixtures of the cluster package's tests (producer, client, admin): ``fake_cluster``, fake
brokers served by threads of the test process (tests/support/fake_broker.py)."""
from __future__ import annotations

import pytest

from tests.support.fake_broker import FakeCluster


@pytest.fixture
def fake_cluster(tmp_path):
    """``make(brokers=2, **options)`` -> a FakeCluster, closed at the end of the test, which
    fails if a client left shared-memory objects behind."""
    made = []

    def make(brokers=2, **options):
        cluster = FakeCluster(tmp_path / f"data-{len(made)}", brokers, **options)
        made.append(cluster)
        return cluster
    yield make
    leftovers = [name for cluster in made for name in cluster.close()]
    assert leftovers == [], f"clients left {leftovers}"
