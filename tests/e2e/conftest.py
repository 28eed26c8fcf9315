"""Fixtures of the end-to-end tests: ``e2e``, clusters and forked client processes for one
test, after which nothing it started may run and nothing of its clusters may be left in
/dev/shm. The harness behind it and the client process bodies are in tests/e2e/helpers.py."""
from __future__ import annotations

import psutil
import pytest

from cluster.supervisor import zygote
from tests.e2e.helpers import E2E, running


@pytest.fixture
def e2e(tmp_path):
    """Clusters and forked client processes for one test; nothing may outlive it."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    harness = E2E(tmp_path)
    try:
        yield harness
    finally:
        harness.finish()
        helpers = zygote.pids()  # they live as long as this process, by design
        new = [p for p in psutil.Process().children(recursive=True)
               if p.pid not in before and p.pid not in helpers and running(p)]
        assert new == [], f"processes left running: {new}"
