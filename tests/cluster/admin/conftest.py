"""The admin client tests use ``fake_cluster`` (tests/conftest.py) and ``admin_of(cluster,
**overrides)``: a KafkaAdminClient of that cluster with short timeouts, closed at the end."""
from __future__ import annotations

import pytest

from cluster.admin.kafka_admin_client import KafkaAdminClient


@pytest.fixture
def admin_of():
    made = []

    def make(cluster, **overrides):
        settings = dict(bootstrap_servers=cluster.data_dir, request_timeout_ms=3000,
                        retry_backoff_ms=5, reconnect_backoff_ms=5, reconnect_backoff_max_ms=50)
        settings.update(overrides)
        admin = KafkaAdminClient(**settings)
        made.append(admin)
        return admin
    yield make
    for admin in made:
        admin.close()
