"""Background work on the logs, as timers run by the broker's loop (no threads touch logs).

Kafka's LogManager schedules these on its own threads; here the loop asks ``next_due()``
how long it may wait and calls ``tick(now)`` every iteration, which runs what is due:

- retention, every log.retention.check.interval.ms: ``delete_old_segments`` below the
  high watermark;
- flush, every log.flush.scheduler.interval.ms: ``flush_if_due`` (the topic's flush.ms and
  flush.messages);
- recovery-point checkpoint, every 60 s (Kafka's log.flush.offset.checkpoint.interval.ms):
  a log idle since the last pass with unflushed data is flushed, so its recovery point
  (and checkpoint file) is current and a crash recovers only recent batches;
- compaction, every 15 s (Kafka's log.cleaner.backoff.ms): ``segments.cleaner.clean`` on
  compacted topics, below the last stable offset (the high watermark when no
  transaction is open);
- producer expiration, every producer.id.expiration.check.interval.ms: each log's
  ``producer_state.remove_expired_producers`` with producer.id.expiration.ms (the
  producers idle that long, without an open transaction, are forgotten, as Kafka's);
- scrub, every ``SCRUB_INTERVAL_MS``: ``PartitionLog.scrub`` CRC-checks one segment not yet
  checked in this process (of the first log that has one), as a first read would, so
  that damage in a replica nobody reads (a follower's, after a clean restart) is found,
  reported and healed (``replica_proc.damaged_replicas``) while an intact replica is
  there to heal it from — one segment per pass, so the loop is never held for long;
- high-watermark checkpoint, every replica.high.watermark.checkpoint.interval.ms:
  ``ReplicaManager.checkpoint_high_watermarks`` (one file for the broker, rewritten only
  when a high watermark moved).

Each pass goes over the partitions the ReplicaManager has open at that moment. A log that
fails (a storage error) is logged and skipped; the other logs still get their turn.

``now`` is the loop's monotonic clock in milliseconds, passed in (tests pass their own);
the logs' own clock decides segment ages.

Owner: the broker's loop thread, the only caller.
"""
from __future__ import annotations

import logging

from segments import cleaner
from segments.errors import StorageError

log = logging.getLogger(__name__)

#: Kafka's log.flush.offset.checkpoint.interval.ms default.
RECOVERY_CHECKPOINT_INTERVAL_MS = 60_000
#: Kafka's log.cleaner.backoff.ms default.
CLEANER_BACKOFF_MS = 15_000
#: Between two segments checked by the scrub.
SCRUB_INTERVAL_MS = 200


class LogManager:
    """Timers over the partitions of ``replica_manager`` (see the module doc)."""

    def __init__(self, replica_manager, config, now):
        self._replicas = replica_manager
        self._tasks = [
            _Task("retention", config["log.retention.check.interval.ms"], self._retention),
            _Task("flush", config["log.flush.scheduler.interval.ms"], self._flush),
            _Task("recovery-point checkpoint", RECOVERY_CHECKPOINT_INTERVAL_MS,
                  self._checkpoint),
            _Task("compaction", CLEANER_BACKOFF_MS, self._compact),
            _Task("producer expiration", config["producer.id.expiration.check.interval.ms"],
                  self._expire_producers),
            _Task("scrub", SCRUB_INTERVAL_MS, self._scrub),
            _Task("high-watermark checkpoint",
                  config["replica.high.watermark.checkpoint.interval.ms"],
                  self._checkpoint_high_watermarks),
        ]
        for task in self._tasks:
            task.due = now + task.interval
        self._end_offsets = {}  # partition -> log end offset at the last checkpoint pass
        self._producer_expiration_ms = config["producer.id.expiration.ms"]

    def next_due(self):
        """The earliest time (ms) a task is due."""
        return min(task.due for task in self._tasks)

    def tick(self, now):
        """Run every task that is due at ``now``; return their names."""
        ran = []
        for task in self._tasks:
            if now >= task.due:
                task.due = now + task.interval
                task.run(self._replicas.partitions())
                ran.append(task.name)
        return ran

    @staticmethod
    def _each(name, partitions, action):
        """``action(partition)`` for each partition; a failure is logged, not raised."""
        for partition in partitions:
            try:
                action(partition)
            except (StorageError, OSError) as exc:
                log.error("%s of %s-%d failed: %s", name, partition.topic, partition.index,
                          exc)

    def _retention(self, partitions):
        def apply(partition):
            deleted = partition.log.delete_old_segments(
                high_watermark=partition.high_watermark)
            if deleted:
                log.info("retention deleted %d segment(s) of %s-%d; log start offset %d",
                         deleted, partition.topic, partition.index,
                         partition.log.log_start_offset)
        self._each("retention", partitions, apply)

    def _flush(self, partitions):
        self._each("flush", partitions, lambda partition: partition.log.flush_if_due())

    def _checkpoint(self, partitions):
        previous = self._end_offsets
        self._end_offsets = {partition: partition.log.log_end_offset
                             for partition in partitions}

        def apply(partition):
            end = self._end_offsets[partition]
            if previous.get(partition) == end and partition.log.recovery_point < end:
                partition.log.flush()
        self._each("recovery-point checkpoint", partitions, apply)

    def _expire_producers(self, partitions):
        def apply(partition):
            log_ = partition.log
            log_.producer_state.remove_expired_producers(log_.clock(),
                                                         self._producer_expiration_ms)
        self._each("producer expiration", partitions, apply)

    def _compact(self, partitions):
        def apply(partition):
            if partition.log.config.compact:
                cleaner.clean(partition.log,
                              last_stable_offset=partition.last_stable_offset)
        self._each("compaction", partitions, apply)


    @staticmethod
    def _scrub(partitions):
        for partition in partitions:
            try:
                if partition.log.scrub():
                    return
            except (StorageError, OSError) as exc:  # offline now: reported to the controller
                log.error("scrub of %s-%d: %s", partition.topic, partition.index, exc)
                return

    def _checkpoint_high_watermarks(self, partitions):
        try:
            self._replicas.checkpoint_high_watermarks()
        except OSError as exc:
            log.error("high-watermark checkpoint failed: %s", exc)


class _Task:
    __slots__ = ("name", "interval", "run", "due")

    def __init__(self, name, interval, run):
        self.name = name
        self.interval = interval
        self.run = run
        self.due = 0
