"""A client's cache of cluster metadata: brokers, controller, topics, partition leaders.

The client's network thread fills it from Metadata responses (``KafkaClient``); any thread
reads it. Every update installs new immutable objects (a new ``topics`` dict, new
``TopicMetadata``), so a reader that took ``cache.topics`` once sees one consistent
snapshot without a lock — the producer's ``send()`` does exactly that, one dict lookup
per record.

Other threads ask for fresher metadata with ``request_update()`` (and name the topics they
need with ``add_topics``), then ``wait_for_update(ticket, timeout)``; the network thread
sees ``need_update``, sends a Metadata request, and ``update()`` or ``update_failed()``
wakes the waiters. Thread safety: ``_condition`` guards the flags, the topic set and the
version; the snapshots are replaced under it and read without it.
"""
from __future__ import annotations

import threading
from typing import NamedTuple

from cluster.errors import for_code


class BrokerMetadata(NamedTuple):
    """A broker as Metadata responses list it (host and port mean nothing on the rings)."""

    node_id: int
    host: str
    port: int
    rack: object


class PartitionMetadata(NamedTuple):
    """One partition's leadership as last reported; ``leader`` -1 while it has none."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple
    isr: tuple
    offline_replicas: tuple
    error_code: int


def no_leader_reason(topic, partition, replicas, isr, offline_replicas, live_brokers):
    """One line on why partition ``topic-partition`` has no leader, naming its replicas'
    brokers and what each is: "partition t-1 has no leader: its only replica, broker 1, is
    stopped". A replica is *stopped* when its broker is not among ``live_brokers`` (or the
    partition lists it offline), *out of the ISR* when its broker runs but may not lead (no
    unclean election), and otherwise waits for the controller to elect it."""
    def state(broker):
        if broker not in live_brokers or broker in offline_replicas:
            return "stopped"
        if broker not in isr:
            return "running but out of the ISR"
        return "running (a leader is being elected)"
    head = f"partition {topic}-{partition} has no leader"
    if not replicas:
        return f"{head}: it has no replicas"
    states = [state(b) for b in replicas]
    if len(replicas) == 1:
        return f"{head}: its only replica, broker {replicas[0]}, is {states[0]}"
    if len(set(states)) == 1:
        brokers = ", ".join(map(str, replicas[:-1])) + f" and {replicas[-1]}"
        return f"{head}: its replicas, brokers {brokers}, are all {states[0]}"
    return f"{head}: of its replicas, " + ", ".join(
        f"broker {b} is {s}" for b, s in zip(replicas, states))


class TopicMetadata:
    """One topic as last reported: its error (0 if none), partitions and which have a leader.

    Immutable once built. ``partition_ids`` is every partition in order (the keyed
    partitioner hashes over all of them), ``available`` those with a leader.
    """

    __slots__ = ("name", "error_code", "is_internal", "partitions", "partition_ids",
                 "available", "leaders")

    def __init__(self, name, error_code, is_internal, partitions):
        self.name = name
        self.error_code = error_code
        self.is_internal = is_internal
        self.partitions = tuple(sorted(partitions, key=lambda p: p.partition))
        self.partition_ids = tuple(p.partition for p in self.partitions)
        self.available = tuple(p.partition for p in self.partitions if p.leader >= 0)
        self.leaders = {p.partition: p.leader for p in self.partitions}

    @property
    def error(self):
        """The error class of ``error_code`` (NoError when there is none)."""
        return for_code(self.error_code)

    def __repr__(self):
        return (f"TopicMetadata({self.name!r}, error={self.error.message}, partitions="
                f"{ {p.partition: p.leader for p in self.partitions} })")


class ClusterMetadata:
    """The client's metadata cache (module doc).

    ``version`` counts updates (0: none yet). ``topics`` maps name -> TopicMetadata for the
    topics the last response described; ``brokers`` maps id -> BrokerMetadata;
    ``controller_id`` is -1 while unknown.
    """

    def __init__(self, cluster_id):
        self.cluster_id = cluster_id
        self.version = 0
        self.brokers = {}
        self.controller_id = -1
        self.topics = {}
        self.last_refresh = None   # clock value of the last update, None before the first
        self.last_error = None     # the exception of the last failed update, if any
        # Tickets: request_update() bumps ``requested``; each attempt remembers the value it
        # was sent for, and when it ends ``answered`` moves up to it. A waiter holding ticket
        # T is served once ``answered >= T``: by an attempt sent after it asked, never by one
        # already in flight with older facts (Kafka's Metadata.requestUpdate / updateVersion).
        self.requested = 0
        self.answered = 0
        self.need_update = True
        self.need_all_topics = False
        # A topic of interest was added since the last attempt: the next refresh goes out
        # without waiting out retry_backoff_ms (Kafka's requestUpdateForNewTopics).
        self.new_topics = False
        self._interest = frozenset()
        self._condition = threading.Condition()

    # -- any thread -------------------------------------------------------------------------

    @property
    def topics_of_interest(self):
        """The topics the next Metadata request asks for (a frozenset)."""
        return self._interest

    def add_topics(self, topics):
        """Ask for these topics from now on; returns True if any was new."""
        with self._condition:
            new = frozenset(topics) - self._interest
            if new:
                self._interest |= new
                self.need_update = True
                self.new_topics = True
                self.requested += 1
            return bool(new)

    def request_update(self, all_topics=False):
        """Ask the network thread for a refresh; returns the ticket to pass to
        ``wait_for_update``."""
        with self._condition:
            self.need_update = True
            self.need_all_topics |= all_topics
            self.requested += 1
            return self.requested

    def wait_for_update(self, ticket, timeout):
        """Wait up to ``timeout`` seconds for an attempt (an update or a failure) sent after
        the ``request_update`` that returned ``ticket``; True if one ended."""
        with self._condition:
            return self._condition.wait_for(lambda: self.answered >= ticket, timeout)

    def topic(self, name):
        """The TopicMetadata of ``name``, or None if the last update did not describe it."""
        return self.topics.get(name)

    def leader_for(self, topic, partition):
        """The leader of a partition, -1 if unknown or offline."""
        info = self.topics.get(topic)
        return -1 if info is None else info.leaders.get(partition, -1)

    def why_no_leader(self, topic, partition):
        """``no_leader_reason`` of a partition the cache knows without a leader; None when it
        has one, or the cache does not know it."""
        info = self.topics.get(topic)
        if info is None or info.leaders.get(partition, 0) >= 0:
            return None
        p = info.partitions[info.partition_ids.index(partition)]
        return no_leader_reason(topic, partition, p.replicas, p.isr, p.offline_replicas,
                                self.brokers)

    def partitions_for_topic(self, topic):
        """The set of partition ids of ``topic``, or None if unknown or in error."""
        info = self.topics.get(topic)
        if info is None or info.error_code:
            return None
        return set(info.partition_ids)

    # -- the network thread ---------------------------------------------------------------------

    def update(self, brokers, controller_id, topics, now, all_topics, sent_for):
        """Install what a Metadata response said and wake the waiters. ``sent_for``: the
        ``requested`` value when the request was sent (updates asked for since stay due).

        ``topics``: TopicMetadata by name; when the request named topics (``all_topics``
        False), topics known before and not in the answer are kept.
        """
        with self._condition:
            merged = dict(topics) if all_topics else {**self.topics, **topics}
            self.brokers = dict(brokers)
            self.controller_id = controller_id
            self.topics = merged
            self.version += 1
            self.last_refresh = now
            self.last_error = None
            self.answered = max(self.answered, sent_for)
            self.need_update = self.requested > sent_for
            if all_topics:
                self.need_all_topics = False
            self._condition.notify_all()

    def update_failed(self, exception, sent_for):
        """A refresh attempt failed: remember why and wake the waiters (they may give up)."""
        with self._condition:
            self.last_error = exception
            self.answered = max(self.answered, sent_for)
            self._condition.notify_all()

    def drop_interest(self, names):
        """Stop asking for topics in refreshes; their cached entries stay (a named refresh
        keeps the topics it does not name). For lookups that made them of interest only
        while they ran (Kafka's transient topics)."""
        with self._condition:
            self._interest -= frozenset(names)

    def forget_topics(self, names):
        """Drop topics from the cache (e.g. after deleting them)."""
        with self._condition:
            self.topics = {n: t for n, t in self.topics.items() if n not in names}
            self._interest -= frozenset(names)
            self.need_update = True

