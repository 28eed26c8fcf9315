"""A progress line for long runs, shown only on a terminal.

``Progress(total, what)`` rewrites one line on stderr (``\\r``) at most every
``interval`` seconds — records done, percent, rate — and ``close()`` erases it, so what the
tool prints to stdout stays clean. When stderr is not a terminal (a pipe, a file, a test)
it prints nothing at all.

Owner: the thread running the tool; not thread safe. The clock is injectable.
"""
from __future__ import annotations

import sys
import time

#: Seconds between two updates of the line.
INTERVAL = 0.5


class Progress:
    """Progress of ``total`` units of ``what`` (e.g. "records sent") on ``stream``."""

    def __init__(self, total, what, stream=None, clock=time.monotonic, interval=INTERVAL):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = self.stream.isatty()
        self.total = total
        self.what = what
        self._clock = clock
        self._interval = interval
        self._start = clock()
        self._next = self._start + interval
        self._width = 0

    def update(self, done):
        """Show ``done`` units if the line is due (cheap when it is not)."""
        if not self.enabled:
            return
        now = self._clock()
        if now < self._next:
            return
        self._next = now + self._interval
        elapsed = now - self._start
        rate = done / elapsed if elapsed > 0 else 0.0
        percent = 100.0 * done / self.total if self.total else 100.0
        line = f"{done:,}/{self.total:,} {self.what} ({percent:.0f}%), {rate:,.0f}/s"
        self._write("\r" + line.ljust(self._width))
        self._width = len(line)

    def close(self):
        """Erase the line (safe to call twice)."""
        if self.enabled and self._width:
            self._write("\r" + " " * self._width + "\r")
            self._width = 0

    def _write(self, text):
        self.stream.write(text)
        self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
