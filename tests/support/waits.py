"""The suite's one wait: ``wait_for(condition, what)`` calls ``condition()`` until it is
true, every ``step`` seconds, and fails the test naming ``what`` once ``timeout`` (a bound
of ``tests.support.bounds``) has passed on the monotonic clock. The bound only turns a hang
into a failure; no passing test comes near it.

What runs on a fake clock is not waited for: the test moves the clock (``tests.support.clock``).
"""
from __future__ import annotations

import time

from tests.support.bounds import BOUND


def wait_for(condition, what="the condition", timeout=BOUND, step=0.01):
    """``condition()``'s first true value; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)
    return value
