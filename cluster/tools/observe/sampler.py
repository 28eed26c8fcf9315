"""Reading every stats page of a cluster at a fixed interval in a thread of its own, for
``ringlog profile`` and the table ``make demo`` ends with.

A ``Sample`` is what one read found: its time and every process's snapshot. A process
whose page is gone (it exited and unlinked it) stays in the samples taken before.

``Sampler``: started and stopped by one owner thread; its own thread reads and appends.
``samples`` may be read at any time (a list only appended to).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time

from cluster.stats.snapshot import ProcessSnapshot

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Sample:
    """One read of the pages: at ``t`` (epoch seconds), ``processes`` as they showed."""

    t: float
    processes: tuple[ProcessSnapshot, ...]


class Sampler:
    """Calls ``read()`` (-> snapshots) every ``interval`` seconds from ``start()`` until
    ``stop()``, keeping a ``Sample`` per read. A read that raises is logged once per kind
    of error and skipped: a sampler never stops what it watches."""

    def __init__(self, read, interval=1.0, clock=time.time):
        if interval <= 0:
            raise ValueError(f"the sampling interval must be positive, found {interval}")
        self._read = read
        self.interval = interval
        self._clock = clock
        self.samples = []
        self.failed_reads = 0
        self._stop = threading.Event()
        self._thread = None
        self._errors_seen = set()

    def sample_once(self):
        """Read the pages now and keep the sample (None when the read failed)."""
        try:
            found = tuple(self._read())
        except Exception as exc:  # a page mid-unlink, a cluster not yet made: try next time
            self.failed_reads += 1
            if type(exc) not in self._errors_seen:
                self._errors_seen.add(type(exc))
                log.warning("reading the stats pages failed (retrying every %.1f s): %s",
                            self.interval, exc)
            return None
        sample = Sample(self._clock(), found)
        self.samples.append(sample)
        return sample

    def start(self):
        self._thread = threading.Thread(target=self._run, name="stats-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self):
        next_read = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            next_read += self.interval
            self._stop.wait(max(0.0, next_read - time.monotonic()))

    def stop(self):
        """Stop reading (one last read first) and return the samples."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.sample_once()
        return self.samples

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
