"""``minOffsetsPerTrigger`` with ``maxTriggerDelay``: whether a streaming trigger waits
(Spark's ``KafkaMicroBatchStream.delayBatch``).

A trigger whose partitions have fewer than ``minOffsetsPerTrigger`` new offsets in all
(the high watermarks less the last micro-batch's end; a partition new to the query counts
from offset 0) is skipped — ``latestOffset`` answers the start offsets, and Spark runs no
micro-batch — unless ``maxTriggerDelay`` has passed since the last trigger that ran. The
time of the last trigger starts at 0, so a query's first trigger never waits.

Owner: the stream reader that made it, in Spark's driver-side Python process (one call at a
time). Its time is not checkpointed (Spark's is not either): a restarted query's first
trigger does not wait.
"""
from __future__ import annotations

import logging
import time

log = logging.getLogger("spark_bridge")


def wall_clock_ms():
    """Milliseconds since the epoch (Spark's SystemClock)."""
    return time.time_ns() // 1_000_000


class TriggerDelay:
    """Decides whether a trigger waits for more records (module doc); ``clock`` returns
    milliseconds."""

    def __init__(self, max_delay_ms, clock=wall_clock_ms):
        self.max_delay_ms = max_delay_ms
        self._clock = clock
        self._last_trigger_ms = 0

    def waits(self, min_offsets, start, latest):
        """True when this trigger should be skipped: fewer than ``min_offsets`` offsets
        between ``start`` and ``latest`` ({TopicPartition: offset}) and less than the
        maximum delay since the last trigger that ran."""
        now = self._clock()
        if now - self._last_trigger_ms >= self.max_delay_ms:
            self._last_trigger_ms = now
            return False
        waiting = sum(offset - start.get(tp, 0) for tp, offset in latest.items())
        if waiting < min_offsets:
            log.debug("trigger waits: %d new offsets, minOffsetsPerTrigger %d", waiting,
                      min_offsets)
            return True
        self._last_trigger_ms = now
        return False
