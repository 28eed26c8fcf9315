"""Fixtures of the controller tests: ``env``, a fresh ``Env`` (env.py) per test, closed after
it — every shared-memory object of its cluster must be gone."""
from __future__ import annotations

import pytest

from tests.replica_proc.controller.env import Env


@pytest.fixture
def env(tmp_path):
    environment = Env(tmp_path)
    yield environment
    environment.close()
