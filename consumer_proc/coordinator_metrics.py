"""The group member's metrics, with the names kafka-python's ``metrics()`` reports.

Group ``consumer-coordinator-metrics`` (present when the consumer has a ``group_id``):

    commit-latency-avg / -max, commit-rate, commit-total     OffsetCommit answered, ms
    join-time-avg / -max, join-rate, join-total              JoinGroup answered, ms
    sync-time-avg / -max, sync-rate, sync-total              SyncGroup answered, ms
    heartbeat-response-time-max, heartbeat-rate, heartbeat-total
    last-heartbeat-seconds-ago                               since the last answered
                                                             Heartbeat (-1: none yet)
    assigned-partitions                                      partitions the group gave

Each is recorded per request answered; windows as ``cluster.client.sampled_stat``.

Threads: the consumer's thread records commits, joins and syncs (their futures complete
while it polls the group's client); the heartbeat thread records heartbeats; each stat has
one writer, and the consumer's thread reads.
"""
from __future__ import annotations

import time

from cluster.client.sampled_stat import SampledStat

GROUP = "consumer-coordinator-metrics"


class CoordinatorMetrics:
    """The stats of one group member (module doc)."""

    def __init__(self, samples=2, window=30.0, clock=time.monotonic):
        self._clock = clock
        self.commit_latency = SampledStat(samples, window, clock)
        self.join_time = SampledStat(samples, window, clock)
        self.sync_time = SampledStat(samples, window, clock)
        self.heartbeat_time = SampledStat(samples, window, clock)
        self.last_heartbeat = None  # clock reading of the last answered Heartbeat

    def timed(self, future, stat):
        """Record in ``stat`` the ms from now until ``future`` succeeds; returns it."""
        sent = self._clock()
        clock = self._clock

        def answered(_value):
            stat.record((clock() - sent) * 1000)
        return future.add_callback(answered)

    def heartbeat_answered(self, sent):
        """A Heartbeat sent at clock reading ``sent`` was answered (heartbeat thread)."""
        now = self._clock()
        self.heartbeat_time.record((now - sent) * 1000, now)
        self.last_heartbeat = now

    def snapshot(self, assigned_partitions):
        """``{GROUP: {name: value}}``."""
        last = self.last_heartbeat
        return {GROUP: {
            "commit-latency-avg": self.commit_latency.avg(),
            "commit-latency-max": self.commit_latency.max(),
            "commit-rate": self.commit_latency.count_rate(),
            "commit-total": self.commit_latency.lifetime_count,
            "join-time-avg": self.join_time.avg(),
            "join-time-max": self.join_time.max(),
            "join-rate": self.join_time.count_rate(),
            "join-total": self.join_time.lifetime_count,
            "sync-time-avg": self.sync_time.avg(),
            "sync-time-max": self.sync_time.max(),
            "sync-rate": self.sync_time.count_rate(),
            "sync-total": self.sync_time.lifetime_count,
            "heartbeat-response-time-max": self.heartbeat_time.max(),
            "heartbeat-rate": self.heartbeat_time.count_rate(),
            "heartbeat-total": self.heartbeat_time.lifetime_count,
            "last-heartbeat-seconds-ago": -1.0 if last is None else self._clock() - last,
            "assigned-partitions": assigned_partitions,
        }}
