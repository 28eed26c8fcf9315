"""The stats tests: pages, the publisher and the reader. ``publishing`` makes sure this
process publishes (whatever RINGLOG_STATS the suite runs with) and that no declared
process role outlives the test; processes are forked with tests/support/processes.py and
the shared ``cluster_id`` fixture checks that nothing of the cluster is left in /dev/shm."""
from __future__ import annotations

import pytest

from cluster.stats import publisher


@pytest.fixture
def publishing(monkeypatch):
    monkeypatch.setenv(publisher.ENVIRONMENT_SWITCH, "1")
    yield
    publisher.set_process_role(None)
