"""What a leader knows of one follower replica of a partition it leads (Kafka's Replica).

One ``ReplicaState`` per remote replica, kept by the leader's ``Partition`` and updated by
the follower's Fetch requests (``replica_id`` = the follower's broker id):

- ``log_end_offset``: the follower's log end offset (LEO), which is the ``fetch_offset``
  of its last Fetch (a follower asks for the offset after its last record); ``UNKNOWN``
  until it fetched from this leader;
- ``last_fetch_time`` and ``last_fetch_leader_leo``: when that Fetch was served and the
  leader's LEO at the time;
- ``last_caught_up_time`` (Kafka's Replica.lastCaughtUpTimeMs): the fetch time if
  ``fetch_offset`` >= the leader's LEO now,
  else the previous fetch's time if ``fetch_offset`` >= the leader's LEO at the previous
  fetch (the follower had everything the leader had then), else unchanged. It never
  moves back.

A follower is *caught up* (``is_caught_up``) when its LEO equals the leader's, or it was
caught up less than ``replica.lag.time.max.ms`` ago: the ISR-shrink test (maybeShrinkIsr) and, for
followers outside the ISR, whether the high watermark waits for them (maybeIncrementLeaderHW).

``reset`` is Kafka's resetReplicaState, called when this broker starts a new leader epoch:
a new leader forgets everything but whether the follower is in the ISR (its caught-up time
becomes now, else ``NEVER``); a leader re-elected keeps the follower's LEO and takes now as its
last fetch.

Times are the broker loop's monotonic clock, in seconds. Owner: the broker's loop thread
(through its Partition).
"""
from __future__ import annotations

#: The LEO of a follower that has not fetched from this leader yet (Kafka's UnknownOffset).
UNKNOWN = -1
#: The last caught-up time of a follower never caught up (Kafka's 0 on its wall clock; the
#: loop's monotonic clock may itself be near 0).
NEVER = float("-inf")


class ReplicaState:
    """The leader's view of follower ``broker_id`` (see the module doc)."""

    __slots__ = ("broker_id", "log_end_offset", "last_fetch_time", "last_fetch_leader_leo",
                 "last_caught_up_time")

    def __init__(self, broker_id):
        self.broker_id = broker_id
        self.log_end_offset = UNKNOWN
        self.last_fetch_time = 0.0
        self.last_fetch_leader_leo = UNKNOWN
        self.last_caught_up_time = NEVER

    def __repr__(self):
        return (f"ReplicaState({self.broker_id}, leo={self.log_end_offset}, "
                f"last_fetch={self.last_fetch_time:.3f}, "
                f"caught_up={self.last_caught_up_time:.3f})")

    def on_fetch(self, fetch_offset, leader_leo, now):
        """Record a Fetch at ``fetch_offset`` served at ``now`` when the leader's LEO was
        ``leader_leo`` (Kafka's Replica.updateFetchState)."""
        if fetch_offset >= leader_leo:
            self.last_caught_up_time = max(self.last_caught_up_time, now)
        elif fetch_offset >= self.last_fetch_leader_leo >= 0:
            self.last_caught_up_time = max(self.last_caught_up_time, self.last_fetch_time)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_leo = leader_leo
        self.last_fetch_time = now

    def is_caught_up(self, leader_leo, now, max_lag):
        """Its LEO is the leader's, or it was caught up at most ``max_lag`` seconds ago."""
        return (self.log_end_offset == leader_leo
                or now - self.last_caught_up_time <= max_lag)

    def reset(self, now, leader_leo, new_leader, in_sync):
        """A new leader epoch on this broker (see the module doc)."""
        self.last_caught_up_time = now if in_sync else NEVER
        if new_leader:
            self.log_end_offset = UNKNOWN
            self.last_fetch_leader_leo = UNKNOWN
            self.last_fetch_time = 0.0
        else:
            self.last_fetch_leader_leo = leader_leo
            self.last_fetch_time = now
