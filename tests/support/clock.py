"""The one fake clock of the suite, and T0, the epoch milliseconds tests start at.

``FakeClock`` stands in for ``time.time``/``time.monotonic``-like callables: calling it
reads ``now``, which moves only when the test moves it (``clock.now += dt``,
``clock.now = t`` or ``clock.advance(dt)``), and keeps its type (integer milliseconds stay
integers). With ``step`` every reading first moves it by ``step`` (a clock that runs on by
itself, one step per reading). The unit is the caller's: milliseconds for the logs
(``FakeClock(T0)``), seconds for the clients (``FakeClock(100.0)``).

``AdvancingClock`` is for code that threads run on the real clock beside (the fake
brokers' group coordinator, whose clients poll in threads): it reads ``time.monotonic()``
plus what the test added with ``advance(dt)``, so a test skips a wait (a session running
out) without freezing time for the threads that must keep going."""
from __future__ import annotations

import time

T0 = 1_700_000_000_000
"""A fixed wall-clock time in milliseconds (November 2023) the tests' timestamps start at."""


class FakeClock:
    """A clock that moves only when told (or by ``step`` per reading); see the module doc."""

    def __init__(self, now=0.0, step=None):
        self.now = now
        self.step = step

    def __call__(self):
        if self.step is not None:
            self.now += self.step
        return self.now

    def advance(self, amount):
        self.now += amount


class AdvancingClock:
    """The monotonic clock in seconds, plus what ``advance`` added; see the module doc."""

    def __init__(self):
        self.offset = 0.0

    def __call__(self):
        return time.monotonic() + self.offset

    def advance(self, amount):
        self.offset += amount
