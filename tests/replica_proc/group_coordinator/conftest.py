"""Fixtures of the group coordinator tests: ``env``, a coordinator that owns every
``__consumer_offsets`` partition, on a fake monotonic clock (seconds) and a fake wall clock
(ms), writing to a ``FakeStore`` (store.py) that succeeds at once unless told to hold or
fail; ``Env`` (env.py) has the request helpers."""
from __future__ import annotations

import pytest

from tests.replica_proc.group_coordinator.env import Env


@pytest.fixture
def env():
    return Env()
