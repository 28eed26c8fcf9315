"""The garbage collector's figures per generation, from ``gc.callbacks``.

``GcMonitor().start()`` hooks a callback that runs at the start and the stop of every
collection: it counts collections, objects collected and uncollectable, and the pause
(perf_counter at stop minus at start) into a total, a maximum and a histogram over
``GC_PAUSE_BOUNDS``. ``snapshot()`` returns the three ``GenerationStats``; ``stop()``
unhooks.

Cost: the callback does a few integer and float updates on preallocated lists and one
bisect; it allocates nothing that lives on (the callback's info dict is the collector's).

Owner: the callback runs in whatever thread triggers a collection, with the GIL held (the
collector does not run two collections at once); ``snapshot()`` may be called from any
thread — it copies the lists, and a value may be one collection behind another.
"""
from __future__ import annotations

import bisect
import gc
import time

from cluster.stats.snapshot import GC_PAUSE_BOUNDS, GenerationStats


class GcMonitor:
    """Counts every collection of this process while started (see the module doc)."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.collected = [0, 0, 0]
        self.uncollectable = [0, 0, 0]
        self.pause_total = [0.0, 0.0, 0.0]
        self.pause_max = [0.0, 0.0, 0.0]
        self.histograms = [[0] * (len(GC_PAUSE_BOUNDS) + 1) for _ in range(3)]
        self._started_at = 0.0
        self._hooked = False

    def start(self) -> GcMonitor:
        """Hook the callback (once)."""
        if not self._hooked:
            gc.callbacks.append(self._callback)
            self._hooked = True
        return self

    def stop(self) -> None:
        """Unhook the callback; safe to call twice."""
        if self._hooked:
            self._hooked = False
            try:
                gc.callbacks.remove(self._callback)
            except ValueError:
                pass

    def _callback(self, phase, info, _clock=time.perf_counter,
                  _bisect=bisect.bisect_left, _bounds=GC_PAUSE_BOUNDS):
        if phase == "start":
            self._started_at = _clock()
            return
        pause = _clock() - self._started_at
        generation = info["generation"]
        self.collections[generation] += 1
        self.collected[generation] += info["collected"]
        self.uncollectable[generation] += info["uncollectable"]
        self.pause_total[generation] += pause
        if pause > self.pause_max[generation]:
            self.pause_max[generation] = pause
        self.histograms[generation][_bisect(_bounds, pause)] += 1

    def snapshot(self) -> tuple[GenerationStats, GenerationStats, GenerationStats]:
        """The figures of generations 0, 1 and 2 since start()."""
        return tuple(GenerationStats(self.collections[g], self.collected[g],
                                     self.uncollectable[g], self.pause_total[g],
                                     self.pause_max[g], tuple(self.histograms[g]))
                     for g in range(3))
