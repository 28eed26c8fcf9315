"""Pacing a sender to a target rate, as Kafka's ``ThroughputThrottler`` does for its
performance tools.

``Throttle(rate)`` paces by an absolute schedule: after ``sent`` records, ``pace(sent)``
sleeps until ``sent / rate`` seconds have passed since the throttle was made — only when
the sender is at least ``min_sleep`` ahead, so a fast sender sleeps in slices of
``min_sleep`` (Kafka's 2 ms) instead of once per record, and a sender that fell behind
catches up at once. A rate of -1 (or any negative) means no throttling: ``pace`` does
nothing.

Owner: the sending thread. Clock and sleep are injectable.
"""
from __future__ import annotations

import time

#: Kafka's ThroughputThrottler.MIN_SLEEP_NS, in seconds.
MIN_SLEEP = 0.002


class Throttle:
    """Keeps a sender at ``rate`` units per second (module doc)."""

    def __init__(self, rate, min_sleep=MIN_SLEEP, clock=time.monotonic, sleep=time.sleep):
        if rate == 0:
            raise ValueError("a throughput of 0 would never send; use -1 for no limit")
        self.rate = rate
        self.enabled = rate > 0
        self._min_sleep = min_sleep
        self._clock = clock
        self._sleep = sleep
        self._start = clock()

    def pace(self, sent):
        """Sleep as long as ``sent`` units went out ahead of the schedule."""
        if not self.enabled:
            return
        ahead = self._start + sent / self.rate - self._clock()
        if ahead >= self._min_sleep:
            self._sleep(ahead)
