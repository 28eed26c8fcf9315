"""What a consumer reads: its subscription or assignment, and each partition's position.

kafka-python's ``SubscriptionState`` and Kafka's. A consumer either

* is **assigned** partitions by the user (``assign_from_user``), or
* **subscribes** to topics (or a topic pattern) and is assigned partitions automatically:
  with a ``group_id``, what the group gives it (``assign_from_group``); without one,
  *every* partition of those topics, recomputed whenever the metadata changes
  (``assign_from_subscribed``), as kafka-python's coordinator does when ``group_id`` is
  None.

The two are exclusive until ``unsubscribe()`` (IllegalStateError, kafka-python's message).

Per assigned partition (``TopicPartitionState``): the *position* — the offset of the next
record to hand to the application — or, while it has none, a pending *reset* to the
earliest or latest offset (ListOffsets timestamps ``EARLIEST`` / ``LATEST``); whether the
user paused it; and what the last fetch said about the log (high watermark, log start).
A partition is *fetchable* when it has a position and is not paused. With a group_id
(``use_committed``) a new partition first waits for its committed offset
(``awaiting_committed``, answered by ``consumer_proc.coordinator``); only a partition without
one gets ``auto_offset_reset``. A consumer group's assignment comes in through
``assign_from_group``. Positions and pause
state are kept for partitions that stay assigned across an assignment change.

``auto_offset_reset`` decides what a partition without a position gets: 'earliest',
'latest', or 'none' — then ``reset_missing_positions`` raises NoOffsetForPartitionError
naming the partitions.

Owner: the consumer's thread (KafkaConsumer, like kafka-python's, is not thread-safe).
"""
from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from cluster.errors import IllegalStateError, NoOffsetForPartitionError
from cluster.metadata.model import validate_topic_name

log = logging.getLogger(__name__)

#: ListOffsets timestamps meaning "the log start offset" and "the high watermark".
EARLIEST = -2
LATEST = -1
#: auto_offset_reset -> reset strategy (None: no automatic reset).
STRATEGIES = {"earliest": EARLIEST, "latest": LATEST, "none": None}

NONE, AUTO_TOPICS, AUTO_PATTERN, USER_ASSIGNED = range(4)

_EXCLUSIVE = ("You must choose only one way to configure your consumer: (1) subscribe to "
              "specific topics by name, (2) subscribe to topics matching a regex pattern, "
              "(3) assign itself specific topic-partitions.")


class TopicPartitionState:
    """One assigned partition: position or pending reset, pause flag, log facts."""

    __slots__ = ("position", "reset_strategy", "next_reset_attempt", "paused", "highwater",
                 "log_start_offset", "last_stable_offset", "awaiting_committed")

    def __init__(self, awaiting_committed=False):
        self.position = None            # offset of the next record for the application
        # With a group_id, a new partition's position comes from its committed offset
        # (OffsetFetch) before any reset: set until that answer (or a seek / reset) comes.
        self.awaiting_committed = awaiting_committed
        self.reset_strategy = None      # EARLIEST or LATEST while a reset is pending
        self.next_reset_attempt = 0.0   # clock value before which no ListOffsets is sent
        self.paused = False
        self.highwater = None           # from the last fetch response
        self.log_start_offset = None
        self.last_stable_offset = None

    @property
    def awaiting_reset(self):
        return self.reset_strategy is not None

    @property
    def fetchable(self):
        return self.position is not None and not self.paused

    def seek(self, offset):
        self.position = offset
        self.reset_strategy = None
        self.awaiting_committed = False

    def reset(self, strategy):
        self.position = None
        self.awaiting_committed = False
        self.reset_strategy = strategy
        self.next_reset_attempt = 0.0

    def __repr__(self):
        return (f"TopicPartitionState(position={self.position}, reset={self.reset_strategy}, "
                f"paused={self.paused}, highwater={self.highwater})")


class SubscriptionState:
    """The consumer's subscription, assignment and positions (module doc).

    ``assignment`` maps TopicPartition -> TopicPartitionState in fetch order (the fetcher
    moves a partition that just got data to the end, so the others come first next time).
    """

    def __init__(self, auto_offset_reset="latest", use_committed=False):
        if auto_offset_reset not in STRATEGIES:
            raise ValueError(f"auto_offset_reset must be one of {sorted(STRATEGIES)}, "
                             f"found {auto_offset_reset!r}")
        self.default_reset = STRATEGIES[auto_offset_reset]
        self.subscription = None        # set of topic names, or None
        self.subscribed_pattern = None  # compiled regex, or None
        self.subscription_type = NONE
        self.assignment = {}
        self._user_assignment = frozenset()
        #: With a group_id: new partitions wait for their committed offsets (OffsetFetch).
        self.use_committed = use_committed

    # -- subscription -------------------------------------------------------------------------

    def _set_type(self, subscription_type):
        if self.subscription_type == NONE:
            self.subscription_type = subscription_type
        elif self.subscription_type != subscription_type:
            raise IllegalStateError(_EXCLUSIVE)

    def subscribe(self, topics=(), pattern=None):
        """Subscribe to ``topics`` (a list of names) or ``pattern`` (a regex string), not both;
        replaces an earlier subscription of the same kind."""
        if not topics and not pattern:
            raise ValueError("subscribe needs topics or a pattern, found neither")
        if topics and pattern:
            raise IllegalStateError(_EXCLUSIVE)
        if pattern:
            self._set_type(AUTO_PATTERN)
            self.subscribed_pattern = re.compile(pattern)
            self.subscription = set()
            return
        if isinstance(topics, str) or not isinstance(topics, (Sequence, set, frozenset)):
            raise TypeError(f"topics must be a list of topic names, found "
                            f"{type(topics).__name__} {topics!r}")
        for topic in topics:
            validate_topic_name(topic)
        self._set_type(AUTO_TOPICS)
        self.subscription = set(topics)

    def partitions_auto_assigned(self):
        return self.subscription_type in (AUTO_TOPICS, AUTO_PATTERN)

    def matches(self, topic):
        """True if ``topic`` belongs to the subscription (its list or its pattern)."""
        if self.subscription_type == AUTO_PATTERN:
            return self.subscribed_pattern.match(topic) is not None
        return self.subscription is not None and topic in self.subscription

    def unsubscribe(self):
        """Forget the subscription and the assignment."""
        self.subscription = None
        self.subscribed_pattern = None
        self.subscription_type = NONE
        self._user_assignment = frozenset()
        self.assignment.clear()

    # -- assignment ---------------------------------------------------------------------------

    def assign_from_user(self, partitions):
        """Assign exactly ``partitions`` (TopicPartitions), replacing the assignment."""
        self._set_type(USER_ASSIGNED)
        wanted = frozenset(partitions)
        if wanted != self._user_assignment:
            self._user_assignment = wanted
            self._apply(partitions)

    def assign_from_subscribed(self, partitions):
        """Assign ``partitions`` of subscribed topics (the automatic assignment)."""
        if not self.partitions_auto_assigned():
            raise IllegalStateError(_EXCLUSIVE)
        for tp in partitions:
            if not self.matches(tp.topic):
                raise ValueError(f"partition {tp} is of a topic not subscribed to "
                                 f"({sorted(self.subscription or ())})")
        if self.subscription_type == AUTO_PATTERN:
            self.subscription = {tp.topic for tp in partitions}
        self._apply(partitions)

    def assign_from_group(self, partitions):
        """Assign ``partitions`` (a consumer group's assignment, subscribed topics only);
        positions of partitions kept stay. Returns the partitions added."""
        if not self.partitions_auto_assigned():
            raise IllegalStateError(_EXCLUSIVE)
        for tp in partitions:
            if not self.matches(tp.topic):
                raise ValueError(f"partition {tp} is of a topic not subscribed to "
                                 f"({sorted(self.subscription or ())})")
        return self._apply(partitions)

    def set_pattern_topics(self, topics):
        """The topics a pattern subscription matches now (a group member reports them)."""
        if self.subscription_type != AUTO_PATTERN:
            raise IllegalStateError("set_pattern_topics needs a pattern subscription")
        self.subscription = set(topics)

    def _apply(self, partitions):
        wanted = set(partitions)
        for tp in [tp for tp in self.assignment if tp not in wanted]:
            del self.assignment[tp]
        added = []
        for tp in partitions:
            if tp not in self.assignment:
                self.assignment[tp] = TopicPartitionState(self.use_committed)
                added.append(tp)
        log.debug("assignment: %s", sorted(self.assignment))
        return added

    def assigned_partitions(self):
        return set(self.assignment)

    def is_assigned(self, tp):
        return tp in self.assignment

    def move_to_end(self, tp):
        """Put ``tp`` last in fetch order."""
        state = self.assignment.pop(tp, None)
        if state is not None:
            self.assignment[tp] = state

    # -- positions ----------------------------------------------------------------------------

    def seek(self, tp, offset):
        self.assignment[tp].seek(offset)

    def position(self, tp):
        return self.assignment[tp].position

    def request_offset_reset(self, tp, strategy=None):
        """Reset ``tp`` to ``strategy`` (EARLIEST / LATEST; default: auto_offset_reset —
        with 'none', the partition is left without a position, for
        ``reset_missing_positions`` to report)."""
        self.assignment[tp].reset(self.default_reset if strategy is None else strategy)

    def has_default_reset_policy(self):
        return self.default_reset is not None

    def reset_missing_positions(self):
        """Give every partition with neither position nor pending reset the default reset;
        NoOffsetForPartitionError naming them when auto_offset_reset is 'none'."""
        missing = [tp for tp, state in self.assignment.items()
                   if state.position is None and state.reset_strategy is None
                   and not state.awaiting_committed]
        if not missing:
            return
        if self.default_reset is None:
            raise NoOffsetForPartitionError(
                f"no position for {sorted(missing)} and auto_offset_reset='none': seek() "
                f"them, or use auto_offset_reset 'earliest' or 'latest'")
        for tp in missing:
            self.assignment[tp].reset(self.default_reset)

    def has_all_positions(self):
        return all(state.position is not None for state in self.assignment.values())

    def partitions_needing_reset(self, now):
        """Partitions awaiting a reset whose next attempt is due at ``now``."""
        return [tp for tp, state in self.assignment.items()
                if state.reset_strategy is not None and state.next_reset_attempt <= now]

    def fetchable_partitions(self):
        """Partitions with a position and not paused, in fetch order."""
        return [tp for tp, state in self.assignment.items()
                if state.position is not None and not state.paused]  # ``fetchable``, inlined

    # -- pausing ------------------------------------------------------------------------------

    def pause(self, tp):
        self.assignment[tp].paused = True

    def resume(self, tp):
        self.assignment[tp].paused = False

    def is_paused(self, tp):
        state = self.assignment.get(tp)
        return state is not None and state.paused

    def paused_partitions(self):
        return {tp for tp, state in self.assignment.items() if state.paused}

    def is_fetchable(self, tp):
        state = self.assignment.get(tp)
        return state is not None and state.fetchable
