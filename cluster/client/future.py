"""A result that arrives later: kafka-python's ``kafka.future.Future``, plus waiting.

The network thread completes a future once, with ``success(value)`` or ``failure(exc)``;
callbacks and errbacks registered before run then, in that thread, those registered after
run at once in the registering thread (kafka-python's contract). A callback that raises is
logged and does not stop the others. ``wait(timeout)`` and ``get(timeout)`` block any
other thread until the future is done; the Event they need is made only when someone
waits, so a future nobody waits on costs one lock.

Thread safety: ``_lock`` guards the done flag and the callback lists; any thread may
register callbacks or wait, one thread completes.
"""
from __future__ import annotations

import functools
import logging
import threading

from cluster.errors import KafkaTimeoutError, RetriableError

log = logging.getLogger(__name__)


class Future:
    """One result or one error, delivered once (see the module doc)."""

    __slots__ = ("is_done", "value", "exception", "_callbacks", "_errbacks", "_lock", "_event")

    def __init__(self):
        self.is_done = False
        self.value = None
        self.exception = None
        self._callbacks = []
        self._errbacks = []
        self._lock = threading.Lock()
        self._event = None

    def succeeded(self):
        return self.is_done and self.exception is None

    def failed(self):
        return self.is_done and self.exception is not None

    def retriable(self):
        """True once failed with an error after which the same request may succeed."""
        return self.is_done and isinstance(self.exception, RetriableError)

    # -- completing (one thread) ------------------------------------------------------------

    def success(self, value):
        """Complete with ``value`` and run the callbacks; returns self."""
        with self._lock:
            if self.is_done:
                raise RuntimeError(f"future already completed ({self._outcome()})")
            self.value = value
            self.is_done = True
            callbacks, self._callbacks, self._errbacks = self._callbacks, None, None
            event = self._event
        if event is not None:
            event.set()
        for callback in callbacks:
            _run(callback, value, "callback")
        return self

    def failure(self, exc):
        """Complete with the exception ``exc`` (an instance or a class) and run the
        errbacks; returns self."""
        exception = exc() if isinstance(exc, type) else exc
        if not isinstance(exception, BaseException):
            raise TypeError(f"future failed without an exception: {exc!r}")
        with self._lock:
            if self.is_done:
                raise RuntimeError(f"future already completed ({self._outcome()})")
            self.exception = exception
            self.is_done = True
            errbacks, self._callbacks, self._errbacks = self._errbacks, None, None
            event = self._event
        if event is not None:
            event.set()
        for errback in errbacks:
            _run(errback, exception, "errback")
        return self

    def _outcome(self):
        return f"failed with {self.exception!r}" if self.exception is not None else \
            f"succeeded with {self.value!r}"

    # -- observing (any thread) -------------------------------------------------------------

    def add_callback(self, f, *args, **kwargs):
        """Call ``f(*args, value, **kwargs)`` on success; returns self."""
        if args or kwargs:
            f = functools.partial(f, *args, **kwargs)
        with self._lock:
            if not self.is_done:
                self._callbacks.append(f)
                return self
        if self.exception is None:
            _run(f, self.value, "callback")
        return self

    def add_errback(self, f, *args, **kwargs):
        """Call ``f(*args, exception, **kwargs)`` on failure; returns self."""
        if args or kwargs:
            f = functools.partial(f, *args, **kwargs)
        with self._lock:
            if not self.is_done:
                self._errbacks.append(f)
                return self
        if self.exception is not None:
            _run(f, self.exception, "errback")
        return self

    def add_both(self, f, *args, **kwargs):
        """``f`` as both callback and errback; returns self."""
        self.add_callback(f, *args, **kwargs)
        return self.add_errback(f, *args, **kwargs)

    def chain(self, future):
        """Complete ``future`` the way this one completes; returns self."""
        self.add_callback(future.success)
        return self.add_errback(future.failure)

    def wait(self, timeout=None):
        """Block until done, at most ``timeout`` seconds (None: no limit); True if done."""
        with self._lock:
            if self.is_done:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def get(self, timeout=None):
        """The value, waiting up to ``timeout`` seconds; raises the failure, or
        KafkaTimeoutError if not done in time."""
        if not self.is_done and not self.wait(timeout):
            raise KafkaTimeoutError(f"no result after waiting {timeout} s")
        if self.exception is not None:
            raise self.exception
        return self.value


def _run(function, argument, what):
    try:
        function(argument)
    except Exception:
        log.exception("error in a future's %s %r", what, function)
