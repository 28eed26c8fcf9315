"""The progress display while the suite runs: on a terminal, a rich progress bar over every
run of every case with the case running now; elsewhere (a pipe, a log, a test) one plain
line per finished run, so a log says what ran and how long it took.

Owner: the suite's main thread (``tick`` is called from its waits, never from another
thread).
"""
from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class SuiteProgress:
    """``total`` runs; ``begin(label)`` before each, ``end(outcome)`` after."""

    def __init__(self, total, stream=None, clock=time.monotonic):
        self.stream = sys.stdout if stream is None else stream
        self.total = total
        self.done = 0
        self._clock = clock
        self._label = ""
        self._began = None
        self._live = None
        if self.stream.isatty():
            self._live = Progress(TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  console=Console(file=self.stream), transient=True)
            self._task = self._live.add_task("starting", total=total)

    def __enter__(self):
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(self, *exc):
        if self._live is not None:
            self._live.stop()

    def begin(self, label):
        self._label = label
        self._began = self._clock()
        if self._live is not None:
            self._live.update(self._task, description=label)

    def tick(self):
        if self._live is not None:
            self._live.refresh()

    def end(self, outcome):
        self.done += 1
        elapsed = self._clock() - self._began
        if self._live is not None:
            self._live.advance(self._task)
            self._live.console.print(f"{self._label}: {outcome} ({elapsed:.1f} s)")
        else:
            print(f"[{self.done}/{self.total}] {self._label}: {outcome} ({elapsed:.1f} s)",
                  file=self.stream, flush=True)

    def note(self, text):
        if self._live is not None:
            self._live.console.print(text)
        else:
            print(text, file=self.stream, flush=True)
