"""ListOffsets for the consumer: position resets, and offsets by time, first and last.

Two uses, one request (ListOffsets to each partition's leader, the timestamps grouped per
broker):

* **Resets**, asynchronous: ``reset_offsets_if_needed()`` — called from every poll — sends
  a ListOffsets for the partitions awaiting a reset (``EARLIEST`` -2 gives the log start
  offset, ``LATEST`` -1 the high watermark) and returns; the answer, handled inside a
  later ``KafkaClient.poll``, seeks each partition whose reset is still the one asked
  (a seek meanwhile wins). A partition is asked again after ``retry_backoff_ms`` when its
  leader is unknown or answers a retriable error (metadata refreshed), after
  ``request_timeout_ms`` while an answer is pending.
* **Lookups**, blocking: ``offsets_by_times`` / ``beginning_offsets`` / ``end_offsets``
  send, poll until every partition has an answer, retry what failed retriably (a partition
  without a leader, LEADER_NOT_AVAILABLE in the metadata, or whose leader answered
  NOT_LEADER_OR_FOLLOWER, is asked again after a metadata refresh, as Kafka's consumer does),
  and raise KafkaTimeoutError naming the partitions still unanswered after ``timeout``
  seconds, and for each that had no leader why ("partition t-1 has no leader: its only
  replica, broker 1, is stopped").

A non-retriable error (e.g. an unsupported request) is raised: by the lookup, or — for a
reset — by the next ``reset_offsets_if_needed``.

Owner: the consumer's thread (callbacks run in its client's poll).
"""
from __future__ import annotations

import collections
import logging
import time

from cluster.client.kafka_client import API_VERSIONS
from cluster.errors import KafkaTimeoutError, for_code
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from cluster.structs import TopicPartition
from consumer_proc.fetcher import ISOLATION_LEVELS, build

log = logging.getLogger(__name__)


class OffsetLookup:
    """ListOffsets requests of one consumer (module doc). ``leader`` maps a TopicPartition
    to ``(leader id, leader epoch)`` (the fetcher's, from the metadata cache)."""

    def __init__(self, client, subscriptions, config, leader, clock=time.monotonic):
        self._client = client
        self._subscriptions = subscriptions
        self._leader = leader
        self._clock = clock
        self._isolation = ISOLATION_LEVELS[config["isolation_level"]]
        self._retry_backoff = config["retry_backoff_ms"] / 1000
        self._request_timeout = config["request_timeout_ms"] / 1000
        self._module = protocol.request_module(ApiKey.LIST_OFFSETS,
                                               API_VERSIONS[ApiKey.LIST_OFFSETS])
        self._errors = collections.deque()

    # -- requests -----------------------------------------------------------------------------

    def _group(self, timestamps):
        """``({node: {tp: (timestamp, epoch)}}, [tp without a known leader])``."""
        by_node = {}
        unknown = []
        for tp, timestamp in timestamps.items():
            node, epoch = self._leader(tp)
            if node < 0:
                unknown.append(tp)
            else:
                by_node.setdefault(node, {})[tp] = (timestamp, epoch)
        if unknown:
            self._client.cluster.add_topics({tp.topic for tp in unknown})
            self._client.cluster.request_update()
        return by_node, unknown

    def _send(self, node, partitions):
        module = self._module
        topics = {}
        for tp, (timestamp, epoch) in partitions.items():
            topics.setdefault(tp.topic, []).append(build(
                module.ListOffsetsPartition, partition_index=tp.partition,
                current_leader_epoch=epoch, timestamp=timestamp))
        request = build(module.ListOffsetsRequest, replica_id=-1,
                        isolation_level=self._isolation, topics=tuple(
                            build(module.ListOffsetsTopic, name=name, partitions=tuple(parts))
                            for name, parts in topics.items()))
        return self._client.send(node, request)

    def _parse(self, partitions, response):
        """``(found {tp: (offset, timestamp, leader_epoch)}, retry {tp: retriable error
        class or None}, error or None)`` from a ListOffsets response to a request for
        ``partitions``."""
        found = {}
        retry = {}
        error = None
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                if tp not in partitions:
                    continue
                code = int(p.error_code)
                if not code:
                    found[tp] = (p.offset, p.timestamp, getattr(p, "leader_epoch", -1))
                    continue
                cls = for_code(code)
                if cls.retriable:
                    log.debug("ListOffsets of %s: %s; retrying", tp, cls.message)
                    retry[tp] = cls
                    if cls.invalid_metadata:
                        self._client.cluster.request_update()
                elif error is None:
                    error = cls(f"ListOffsets of {tp.topic}-{tp.partition} at timestamp "
                                f"{partitions[tp][0]}")
        retry.update((tp, None) for tp in partitions if tp not in found and tp not in retry
                     and error is None)
        return found, retry, error

    # -- resets (asynchronous) ----------------------------------------------------------------

    def reset_offsets_if_needed(self):
        """Send ListOffsets for the partitions awaiting a reset that are due (module doc);
        raises a queued error of an earlier reset."""
        if self._errors:
            raise self._errors.popleft()
        now = self._clock()
        due = self._subscriptions.partitions_needing_reset(now)
        if not due:
            return
        assignment = self._subscriptions.assignment
        by_node, unknown = self._group({tp: assignment[tp].reset_strategy for tp in due})
        for tp in unknown:
            assignment[tp].next_reset_attempt = now + self._retry_backoff
        for node, partitions in by_node.items():
            for tp in partitions:
                assignment[tp].next_reset_attempt = now + self._request_timeout
            future = self._send(node, partitions)
            future.add_callback(self._handle_reset, partitions)
            future.add_errback(self._reset_failed, partitions)

    def _handle_reset(self, partitions, response):
        found, retry, error = self._parse(partitions, response)
        assignment = self._subscriptions.assignment
        for tp, (offset, _, _) in found.items():
            state = assignment.get(tp)
            if state is not None and state.reset_strategy == partitions[tp][0]:
                log.info("resetting the position of %s to offset %d", tp, offset)
                state.seek(offset)
        self._retry_later(retry)
        if error is not None:
            self._errors.append(error)

    def _reset_failed(self, partitions, exception):
        log.debug("ListOffsets for %s failed: %s", sorted(partitions), exception)
        self._retry_later(partitions)

    def _retry_later(self, partitions):
        assignment = self._subscriptions.assignment
        later = self._clock() + self._retry_backoff
        for tp in partitions:
            state = assignment.get(tp)
            if state is not None and state.reset_strategy is not None:
                state.next_reset_attempt = later

    def wait_for_resets(self, partitions, timeout):
        """Drive the resets of ``partitions`` until each has a position; KafkaTimeoutError
        naming those still without one after ``timeout`` seconds."""
        assignment = self._subscriptions.assignment
        deadline = self._clock() + timeout
        while True:
            pending = [tp for tp in partitions if assignment[tp].position is None]
            if not pending:
                return
            self.reset_offsets_if_needed()
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise KafkaTimeoutError(f"no position for {sorted(pending)} within "
                                        f"{timeout} s" + self._why(pending, {}))
            self._client.poll(min(remaining, self._retry_backoff))

    # -- lookups (blocking) -------------------------------------------------------------------

    def offsets_by_times(self, timestamps, timeout):
        """``{tp: (offset, timestamp, leader_epoch) or None}`` for ``{tp: timestamp}``
        (None: no record at or after the timestamp), waiting up to ``timeout`` seconds.
        Their topics are of interest to the metadata cache meanwhile (Kafka's transient
        topics), so a refresh after a leader change names their new leaders even when
        this consumer neither subscribes to nor is assigned them."""
        cluster = self._client.cluster
        transient = {tp.topic for tp in timestamps} - cluster.topics_of_interest
        cluster.add_topics(transient)  # Kafka's transient topics: refreshed while looked up
        try:
            return self._offsets_by_times(timestamps, timeout)
        finally:
            cluster.drop_interest(transient)

    def _offsets_by_times(self, timestamps, timeout):
        results = {}
        remaining = dict(timestamps)
        answered = {}  # tp -> the retriable error its leader last answered
        deadline = self._clock() + timeout
        while remaining:
            by_node, _ = self._group(remaining)
            sent = [(self._send(node, partitions), partitions)
                    for node, partitions in by_node.items()]
            while any(not future.is_done for future, _ in sent):
                left = deadline - self._clock()
                if left <= 0:
                    break
                self._client.poll(left)
            for future, partitions in sent:
                if not future.is_done or future.failed():
                    continue
                found, retry, error = self._parse(partitions, future.value)
                if error is not None:
                    raise error
                answered.update((tp, cls) for tp, cls in retry.items() if cls is not None)
                for tp, (offset, stamp, epoch) in found.items():
                    results[tp] = None if offset < 0 else (offset, stamp, epoch)
                    del remaining[tp]
            if not remaining:
                break
            left = deadline - self._clock()
            if left <= 0:
                raise KafkaTimeoutError(
                    f"ListOffsets for {sorted(remaining)} not answered within {timeout} s"
                    + self._why(remaining, answered) + self._client_errors(sent))
            self._client.poll(min(left, self._retry_backoff))
        return results

    def _why(self, partitions, answered):
        """``: <why>; <why>`` for the ``partitions`` (sorted) that have no leader in the
        metadata cache (``ClusterMetadata.why_no_leader``) or whose leader last answered a
        retriable error (``answered``: {tp: error class}); "" when none did."""
        cluster = self._client.cluster
        reasons = []
        for tp in sorted(partitions):
            reason = cluster.why_no_leader(tp.topic, tp.partition)
            if reason is None and tp in answered:
                reason = f"{tp.topic}-{tp.partition}: its leader answered {answered[tp].message}"
            if reason is not None:
                reasons.append(reason)
        return f": {'; '.join(reasons)}" if reasons else ""

    @staticmethod
    def _client_errors(sent):
        errors = {str(f.exception) for f, _ in sent if f.is_done and f.failed()}
        return f" (last errors: {'; '.join(sorted(errors))})" if errors else ""

    def offsets_at(self, partitions, timestamp, timeout):
        """``{tp: offset}`` for the EARLIEST or LATEST ``timestamp`` of each partition."""
        found = self.offsets_by_times({tp: timestamp for tp in partitions}, timeout)
        return {tp: value[0] for tp, value in found.items()}
