"""The reconnect back-off: 50 ms doubling to 1 s (Kafka's client defaults), jittered by
+-20 % but never past the maximum, per destination, reset by a connection."""
from __future__ import annotations

import pytest

from cluster.client.reconnect_backoff import ReconnectBackoff
from tests.support.clock import FakeClock


class Fixed:
    """An rng whose ``random()`` is always ``value``."""

    def __init__(self, value):
        self.value = value

    def random(self):
        return self.value


def test_the_wait_doubles_to_the_maximum_with_the_jitter_around_it():
    clock = FakeClock(10.0)
    middle = ReconnectBackoff(0.05, 1.0, clock, Fixed(0.5))  # a factor of exactly 1
    assert [middle.failed("b") for _ in range(7)] == pytest.approx(
        [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    low = ReconnectBackoff(0.05, 1.0, clock, Fixed(0.0))
    high = ReconnectBackoff(0.05, 1.0, clock, Fixed(0.999999))
    assert low.failed("b") == pytest.approx(0.04) and high.failed("b") == pytest.approx(0.06)
    assert [high.failed("b") for _ in range(4)][-1] == pytest.approx(0.96, rel=1e-4)
    assert high.failed("b") == 1.0  # 1.2 x 1 s, capped


def test_ready_per_destination_and_reset_on_connect():
    clock = FakeClock(10.0)
    backoff = ReconnectBackoff(0.05, 1.0, clock, Fixed(0.5))
    assert backoff.ready("a") and backoff.remaining("a") == 0
    backoff.failed("a")
    backoff.failed("a")
    assert not backoff.ready("a") and backoff.ready("b")
    assert backoff.remaining("a") == pytest.approx(0.1)
    clock.advance(0.1)
    assert backoff.ready("a")
    backoff.connected("a")
    assert backoff.failed("a") == pytest.approx(0.05)


def test_negative_bounds_are_refused():
    with pytest.raises(ValueError, match="initial -1 and maximum 1 must be >= 0"):
        ReconnectBackoff(-1, 1, FakeClock())


def test_kafkas_odd_settings_work_as_in_kafka():
    """Clients take any reconnect_backoff_ms >= 0, as Kafka's do: 0 retries at once, and a
    maximum below the initial wait caps it."""
    assert ReconnectBackoff(0, 1, FakeClock()).failed("a") == 0
    capped = ReconnectBackoff(2, 1, FakeClock())
    assert [capped.failed("a") for _ in range(3)] == [1, 1, 1]
