"""Fixtures of the transaction coordinator tests: ``env``, an ``Env`` (env.py): a
coordinator that owns every ``__transaction_state`` partition at coordinator epoch 0, on a
fake wall clock, writing to a fake log that stores at once unless told to hold or fail."""
from __future__ import annotations

import pytest

from tests.replica_proc.transaction_coordinator.env import Env


@pytest.fixture
def env():
    return Env()
