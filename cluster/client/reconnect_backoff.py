"""Reconnect back-off per destination (Kafka's ClusterConnectionStates with its
ExponentialBackoff: reconnect.backoff.ms growing to reconnect.backoff.max.ms).

After the n-th failed connection attempt in a row to a destination (n = 1, 2, ...), the
next attempt waits ``initial * 2 ** (n - 1)``, times a random factor in
``[1 - jitter, 1 + jitter)`` (Kafka's 0.2, so that many waiters do not retry in step),
at most ``maximum`` — 50, 100, 200, 400, 800, 1000, 1000 ... ms with Kafka's client
defaults. A successful connection resets it: the next failure waits ``initial`` again.

``ReconnectBackoff(initial, maximum, clock, rng)``: times in the clock's unit (seconds
for the broker loop's monotonic clock); ``rng`` a ``random.Random``-like object (tests
pass a seeded one). ``ready(key)`` says whether an attempt may be made now, ``failed(key)``
records a failed one, ``connected(key)`` a success.

Owner: whoever owns the connections (one thread); no lock.
"""
from __future__ import annotations

import math
import random

#: Kafka's RECONNECT_BACKOFF_JITTER and RECONNECT_BACKOFF_EXP_BASE.
JITTER = 0.2
MULTIPLIER = 2


class ReconnectBackoff:
    """Per-destination reconnect back-off (module doc)."""

    def __init__(self, initial, maximum, clock, rng=None, jitter=JITTER):
        if initial < 0 or maximum < 0:
            raise ValueError(f"reconnect backoff: initial {initial} and maximum {maximum} "
                             f"must be >= 0")
        self.initial = initial
        self.maximum = maximum
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._jitter = jitter
        # the largest exponent that matters (Kafka's expMax)
        # (0 when the maximum is not above the initial: every wait is then the maximum's
        # cap of the initial one, as Kafka's ExponentialBackoff does with such settings)
        self._max_exponent = (math.log(maximum / initial, MULTIPLIER)
                              if 0 < initial < maximum else 0)
        self._failures = {}  # key -> failed attempts in a row
        self._next = {}  # key -> the clock value before which no attempt is made

    def backoff(self, failures):
        """The wait after ``failures`` failed attempts in a row (>= 1), jittered."""
        term = self.initial * MULTIPLIER ** min(failures - 1, self._max_exponent)
        factor = 1 + self._jitter * (2 * self._rng.random() - 1)
        return min(term * factor, self.maximum)

    def ready(self, key):
        """Whether a connection attempt to ``key`` may be made now."""
        return self._clock() >= self._next.get(key, -math.inf)

    def remaining(self, key):
        """How long until an attempt to ``key`` may be made (0: now)."""
        return max(0, self._next.get(key, -math.inf) - self._clock())

    def failed(self, key):
        """An attempt to ``key`` failed: back off; return the wait."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        wait = self.backoff(failures)
        self._next[key] = self._clock() + wait
        return wait

    def connected(self, key):
        """An attempt to ``key`` succeeded: the next failure starts from ``initial``."""
        self._failures.pop(key, None)
        self._next.pop(key, None)
