"""Fixtures of the group coordinator tests: ``env``, an ``Env`` (env.py): a coordinator that
owns every ``__consumer_offsets`` partition, on a fake monotonic clock (seconds) and a fake
wall clock (ms), writing to a ``FakeStore`` that succeeds at once unless told to hold or
fail, with one helper per request."""
from __future__ import annotations

import pytest

from tests.replica_proc.group_coordinator.env import Env


@pytest.fixture
def env():
    return Env()
