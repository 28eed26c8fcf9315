"""KafkaConsumer: kafka-python's consumer API over ringlog's rings, with consumer groups.

::

    consumer = KafkaConsumer("app-logs", bootstrap_servers=data_dir,
                             auto_offset_reset="earliest", consumer_timeout_ms=1000)
    for record in consumer:                        # ConsumerRecord, kafka-python's fields
        handle(record.offset, record.key, record.value)

    consumer = KafkaConsumer(bootstrap_servers=data_dir)
    consumer.assign([TopicPartition("app-logs", 0)])
    consumer.seek(TopicPartition("app-logs", 0), 1000)
    batch = consumer.poll(timeout_ms=500)          # {TopicPartition: [ConsumerRecord]}
    columns = consumer.poll_batches(timeout_ms=500)  # {TopicPartition: [RecordColumns]}

Configuration: kafka-python's keyword arguments and defaults (``cluster.config.ConsumerConfig``);
``bootstrap_servers`` is the cluster's data directory.

**With a group** (``group_id``)::

    consumer = KafkaConsumer("app-logs", bootstrap_servers=data_dir, group_id="alerts")
    consumer.subscribe(["app-logs"], listener=MyListener())  # a ConsumerRebalanceListener
    for record in consumer: ...                    # auto-commit every 5 s, and on close

the members of the group share the partitions of the topics they subscribe to
(``consumer_proc.coordinator``: joining, rebalances, heartbeats, commits); a new
partition starts from the group's committed offset, else from ``auto_offset_reset``.
``commit``, ``commit_async`` and ``committed`` work with the group's offsets, also after
``assign`` (then without group management, as kafka-python).

**Without a group.** Topics given to the constructor or to ``subscribe`` are assigned
*all* their partitions, and the assignment follows the metadata as partitions are added —
what kafka-python does when ``group_id`` is None; none of the group machinery runs.
``assign`` takes explicit partitions instead; the two are exclusive until ``unsubscribe``.
Positions start from ``auto_offset_reset``, or wherever ``seek`` puts them; ``commit``,
``commit_async`` and ``committed`` raise IllegalStateError('Requires group_id'), as in
kafka-python.

**How records arrive** (``fetcher``): one Fetch in flight per broker, sent again as soon
as records are drained and before they are returned, so the broker copies the next
batches into this consumer's ring while the application works; records are parsed when
taken (``partition_records``, vectorised by ``columns_parser``). ``poll`` returns up to
``max_poll_records`` ConsumerRecords; ``poll_batches`` is ringlog's bulk read: the same
records as ``RecordColumns`` (numpy offsets and timestamps, keys and values still in the
fetched bytes), no deserializers, no per-record objects.

**Faults.** A broker that dies fails its fetch: logged once, counted in ``metrics()``
(``fetch-error-total``), and its partitions are fetched again when it is back; the other
brokers' records keep coming. Blocking calls (``beginning_offsets``, ``end_offsets``,
``offsets_for_times``, ``topics``, ``partitions_for_topic``) raise KafkaTimeoutError after
``timeout_ms`` (default ``default_api_timeout_ms``, 60 s) while the partitions they need
have no reachable leader; ``position`` then returns None, as kafka-python's.

**Leader changes** (``fetcher``): a fetch refused by a former leader, a leader epoch moved
on (FENCED_LEADER_EPOCH: fetches carry ``current_leader_epoch``), a storage error or a dead
or hung broker sends the partition's next fetch to the leader named by refreshed metadata,
from the same position; OFFSET_OUT_OF_RANGE from a new leader missing the tail resets by
``auto_offset_reset``. Offset lookups follow the leader the same way.

Not implemented: fetch sessions (every fetch is a full one), position
validation against leader epochs after a leader change (KIP-320's OffsetsForLeaderEpoch:
the protocol has no api key 23 yet; the hook is described in ``fetcher``),
``read_committed`` filtering (there are no transactions).

Thread safety: none, as kafka-python's: one thread makes every call.
"""
from __future__ import annotations

import inspect
import logging
import math
import os
import sys
import time

from cluster.client.kafka_client import KafkaClient, ring_capacity_for
from cluster.config import ConsumerConfig
from cluster.errors import IllegalStateError, KafkaTimeoutError
from cluster.protocol.frame_descriptor import FRAME_HEADROOM_BYTES
from cluster.stats.publisher import process_stats
from cluster.structs import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from consumer_proc.consumer_stats import ConsumerStatsSource
from consumer_proc.coordinator import ConsumerCoordinator
from consumer_proc.fetch_metrics import FetchMetrics
from consumer_proc.fetcher import Fetcher
from consumer_proc.offset_lookup import OffsetLookup
from consumer_proc.subscription_state import AUTO_PATTERN, EARLIEST, LATEST, SubscriptionState
from segments.log_config import LogConfig

log = logging.getLogger(__name__)

def _deserializer(hook):
    """A ``(topic, headers, data) -> object`` callable for a kafka-python deserializer hook
    (None stays None): a plain callable takes the data only; a Deserializer's
    ``deserialize`` takes (topic, headers, data), or (topic, data) in older code."""
    if hook is None:
        return None
    deserialize = getattr(hook, "deserialize", None)
    if deserialize is None:
        return lambda topic, headers, data: hook(data)
    try:
        parameters = inspect.signature(deserialize).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: assume the new form
        return deserialize
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in parameters):
        return deserialize
    return lambda topic, headers, data: deserialize(topic, data)


def _check_partitions(partitions):
    if not all(isinstance(tp, TopicPartition) for tp in partitions):
        raise TypeError(f"partitions must be TopicPartition namedtuples, found "
                        f"{[tp for tp in partitions if not isinstance(tp, TopicPartition)]!r}")


class KafkaConsumer:
    """Consume records from a ringlog cluster (module doc). ``topics``: topics to subscribe
    to (all their partitions); ``configs``: kafka-python's keyword arguments; ``clock``
    (monotonic seconds) is for tests."""

    DEFAULT_CONFIG = ConsumerConfig.DEFAULT_CONFIG

    def __init__(self, *topics, clock=time.monotonic, **configs):
        config = ConsumerConfig(**configs)
        self.config = config
        self._clock = clock
        self._closed = False
        self._api_timeout = config["default_api_timeout_ms"] / 1000
        self._retry_backoff = config["retry_backoff_ms"] / 1000
        self._metadata_max_age = config["metadata_max_age_ms"] / 1000
        # Rings whose frames hold one whole batch of the largest kind a broker stores by
        # default and what a partition fetch asks for, so the common answer is one frame;
        # a longer one (a topic's larger max.message.bytes) comes as fragments (shm_ring).
        capacity = ring_capacity_for(max(config["max_partition_fetch_bytes"],
                                         LogConfig.max_message_bytes) + FRAME_HEADROOM_BYTES)
        self._client = KafkaClient(config, clock=clock, ring_capacity=capacity)
        self._subscription = SubscriptionState(config["auto_offset_reset"],
                                               use_committed=config["group_id"] is not None)
        self._coordinator = None
        self._metrics = FetchMetrics(config["metrics_num_samples"],
                                     config["metrics_sample_window_ms"] / 1000, clock)
        self._fetcher = Fetcher(
            self._client, self._subscription, config, self._metrics,
            key_deserializer=_deserializer(config["key_deserializer"]),
            value_deserializer=_deserializer(config["value_deserializer"]),
            clock=clock)
        self._offsets = OffsetLookup(self._client, self._subscription, config,
                                     self._fetcher.leader, clock)
        self._assigned_version = None  # metadata version the automatic assignment follows
        self._iterator = None
        self._consumer_timeout = math.inf
        self._stats = process_stats(self._client.namespace, "consumer",
                                    config["client_id"] or f"consumer-{os.getpid()}")
        self._stats.add_source(ConsumerStatsSource(self._metrics))
        try:
            if config["group_id"] is not None:
                self._coordinator = ConsumerCoordinator(self._client, self._subscription,
                                                        config, clock)
            if topics:
                self.subscribe(list(topics))
            self._client.wait_for_metadata(config["bootstrap_timeout_ms"] / 1000)
        except BaseException:
            self.close()
            raise

    # -- subscription and assignment ------------------------------------------------------------

    def subscribe(self, topics=(), pattern=None, listener=None):
        """Subscribe to ``topics`` (a list) or to the topics matching ``pattern`` (a regex):
        with a group, the group shares their partitions and ``listener`` (a
        ConsumerRebalanceListener) hears of each change; without one, every partition of
        them is assigned (module doc). Replaces an earlier subscription; IllegalStateError
        after ``assign``."""
        if listener is not None and not all(callable(getattr(listener, name, None)) for name
                                            in ("on_partitions_revoked",
                                                "on_partitions_assigned")):
            raise TypeError(f"listener must be a ConsumerRebalanceListener, found "
                            f"{listener!r}")
        self._subscription.subscribe(topics=topics, pattern=pattern)
        if self._coordinator is not None:
            self._coordinator.listener = listener
        cluster = self._client.cluster
        if pattern is not None:
            cluster.request_update(all_topics=True)
        else:
            cluster.add_topics(topics)
        self._assigned_version = None
        self._iterator = None

    def subscription(self):
        """The subscribed topics (a set), or None."""
        topics = self._subscription.subscription
        return None if topics is None else set(topics)

    def unsubscribe(self):
        """Forget the subscription or assignment and every position (a group member
        revokes its partitions and leaves the group)."""
        if self._coordinator is not None:
            self._coordinator.on_unsubscribe()
        self._subscription.unsubscribe()
        self._fetcher.discard()
        self._iterator = None

    def assign(self, partitions):
        """Read exactly ``partitions`` (TopicPartitions), replacing the assignment; an empty
        list unsubscribes. IllegalStateError after ``subscribe``."""
        partitions = list(partitions)
        _check_partitions(partitions)
        if not partitions:
            self.unsubscribe()
            return
        self._subscription.assign_from_user(partitions)
        self._client.cluster.add_topics({tp.topic for tp in partitions})
        self._iterator = None

    def assignment(self):
        """The assigned TopicPartitions (a set)."""
        self._update_assignment()
        return self._subscription.assigned_partitions()

    def _update_assignment(self):
        """Without a group, a subscription's assignment is every partition of its topics in
        the newest metadata (kafka-python with group_id None). With a group, the group's
        coordinator assigns (``poll``)."""
        subscription = self._subscription
        if not subscription.partitions_auto_assigned() or self._coordinator is not None:
            return
        cluster = self._client.cluster
        if subscription.subscription_type == AUTO_PATTERN and (
                cluster.last_refresh is None
                or self._clock() - cluster.last_refresh >= self._metadata_max_age):
            cluster.request_update(all_topics=True)
        if cluster.version == self._assigned_version:
            return
        self._assigned_version = cluster.version
        exclude_internal = self.config["exclude_internal_topics"]
        partitions = []
        for name, info in cluster.topics.items():
            if (info.error_code or not subscription.matches(name)
                    or (exclude_internal and info.is_internal
                        and subscription.subscription_type == AUTO_PATTERN)):
                continue
            partitions += [TopicPartition(name, p) for p in info.partition_ids]
        if subscription.subscription_type != AUTO_PATTERN:
            found = {tp.topic for tp in partitions}
            if any(topic not in found for topic in subscription.subscription):
                cluster.request_update()  # not created yet, or being created
        subscription.assign_from_subscribed(partitions)

    # -- positions ------------------------------------------------------------------------------

    def _assigned(self, partition):
        if not isinstance(partition, TopicPartition):
            raise TypeError(f"partition must be a TopicPartition namedtuple, found "
                            f"{partition!r}")
        self._update_assignment()
        if not self._subscription.is_assigned(partition):
            raise IllegalStateError(f"partition {partition} is not assigned (assignment: "
                                    f"{sorted(self._subscription.assignment)})")
        return partition

    def seek(self, partition, offset):
        """Read ``partition`` from ``offset`` on (the next poll fetches from there)."""
        if not isinstance(partition, TopicPartition):
            raise TypeError(f"partition must be a TopicPartition namedtuple, found "
                            f"{partition!r}")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"Offset must be int >= 0, found {offset!r}")
        self._update_assignment()
        if not self._subscription.is_assigned(partition):
            raise ValueError(f"Unassigned partition {partition}")
        log.debug("seeking %s to offset %d", partition, offset)
        self._subscription.seek(partition, offset)
        self._iterator = None

    def _seek_to(self, partitions, strategy):
        _check_partitions(partitions)
        self._update_assignment()
        assigned = self._subscription.assigned_partitions()
        if not partitions:
            if not assigned:
                raise ValueError("No partitions are currently assigned")
            partitions = assigned
        for tp in partitions:
            if tp not in assigned:
                raise ValueError(f"Unassigned partition: {tp}")
        for tp in partitions:
            self._subscription.request_offset_reset(tp, strategy)
        self._iterator = None

    def seek_to_beginning(self, *partitions):
        """Read ``partitions`` (default: all assigned) from their log start offset."""
        self._seek_to(partitions, EARLIEST)

    def seek_to_end(self, *partitions):
        """Read ``partitions`` (default: all assigned) from their high watermark on."""
        self._seek_to(partitions, LATEST)

    def position(self, partition, timeout_ms=None):
        """The offset of the next record ``poll`` returns from ``partition``, resolving a
        pending reset first (ListOffsets, up to ``timeout_ms``); None if that does not
        finish in time. NoOffsetForPartitionError when it has no position and
        auto_offset_reset is 'none'."""
        tp = self._assigned(partition)
        state = self._subscription.assignment[tp]
        if state.position is None:
            timeout = self._api_timeout if timeout_ms is None else timeout_ms / 1000
            if self._coordinator is not None and state.awaiting_committed:
                self._coordinator.refresh_committed_offsets(self._clock() + timeout)
            self._subscription.reset_missing_positions()
            try:
                self._offsets.wait_for_resets([tp], timeout)
            except KafkaTimeoutError:
                return None
        return state.position

    def highwater(self, partition):
        """The high watermark of ``partition`` from the last fetch response (None before
        one)."""
        return self._subscription.assignment[self._assigned(partition)].highwater

    def pause(self, *partitions):
        """Stop returning (and fetching) records of ``partitions`` until ``resume``."""
        for tp in partitions:
            self._subscription.pause(self._assigned(tp))

    def resume(self, *partitions):
        """Return records of paused ``partitions`` again."""
        for tp in partitions:
            self._subscription.resume(self._assigned(tp))

    def paused(self):
        """The paused partitions (a set)."""
        return self._subscription.paused_partitions()

    # -- polling --------------------------------------------------------------------------------

    def poll(self, timeout_ms=0, max_records=None, update_offsets=True):
        """Records fetched from the assigned partitions: ``{TopicPartition:
        [ConsumerRecord]}``, at most ``max_records`` (default ``max_poll_records``) in all,
        waiting up to ``timeout_ms`` when none is ready (empty dict then).
        ``update_offsets`` False leaves the positions for the caller to advance (the
        iterator does, record by record)."""
        if max_records is None:
            max_records = self.config["max_poll_records"]
        return self._poll(timeout_ms, max_records, update_offsets, columns=False)

    def poll_batches(self, timeout_ms=0, max_records=None):
        """ringlog's bulk read: like ``poll`` but ``{TopicPartition: [RecordColumns]}``
        (``record_columns``), keys and values not deserialized; ``max_records`` default:
        everything fetched so far."""
        return self._poll(timeout_ms, sys.maxsize if max_records is None else max_records,
                          True, columns=True)

    def _poll(self, timeout_ms, max_records, update_offsets, columns):
        if timeout_ms < 0:
            raise ValueError(f"Timeout must not be negative, found {timeout_ms!r}")
        if not isinstance(max_records, int) or isinstance(max_records, bool):
            raise TypeError(f"max_records must be an integer, found {max_records!r}")
        if max_records <= 0:
            raise ValueError(f"max_records must be positive, found {max_records!r}")
        if self._closed:
            raise IllegalStateError("KafkaConsumer is closed")
        deadline = self._clock() + timeout_ms / 1000
        while True:
            records = self._poll_once(deadline, max_records, update_offsets, columns)
            if records or self._clock() >= deadline:
                return records

    def _poll_once(self, deadline, max_records, update_offsets, columns):
        """Update the assignment and positions, drain what is buffered, send the next
        fetches; wait (until ``deadline`` at most) for a response when nothing was ready."""
        fetcher = self._fetcher
        if self._coordinator is not None:
            self._coordinator.poll(deadline)
        self._update_assignment()
        self._subscription.reset_missing_positions()
        self._offsets.reset_offsets_if_needed()
        records = self._drain(max_records, update_offsets, columns)
        fetcher.send_fetches()  # before returning records: the pipelining (module doc)
        if records:
            return records
        wait = deadline - self._clock()
        if not fetcher.in_flight():
            wait = min(wait, self._retry_backoff)
        self._client.poll(max(0.0, wait))
        fetcher.send_fetches()  # the next fetch goes out before these records are parsed
        return self._drain(max_records, update_offsets, columns)

    def _drain(self, max_records, update_offsets, columns):
        if columns:
            return self._fetcher.fetched_columns(max_records)
        return self._fetcher.fetched_records(max_records, update_offsets)

    # -- iteration ------------------------------------------------------------------------------

    def _message_generator(self):
        timeout_ms = 1000 * max(0.0, self._consumer_timeout - self._clock())
        records = self.poll(timeout_ms=min(timeout_ms, 1e9), update_offsets=False)
        assignment = self._subscription.assignment
        for tp, batch in records.items():
            state = assignment.get(tp)
            for record in batch:
                # A seek or reassignment meanwhile replaces this generator (they set
                # self._iterator to None); a pause stops this partition's records here.
                if state.paused:
                    break
                state.position = record.offset + 1
                yield record

    def __iter__(self):
        return self

    def __next__(self):
        if self._closed:
            raise StopIteration("KafkaConsumer closed")
        if self._iterator is not None:
            try:
                return next(self._iterator)
            except StopIteration:
                self._iterator = None
        self._consumer_timeout = self._clock() + self.config["consumer_timeout_ms"] / 1000
        while self._clock() < self._consumer_timeout:
            if self._iterator is None:
                self._iterator = self._message_generator()
            try:
                return next(self._iterator)
            except StopIteration:
                self._iterator = None
        raise StopIteration()

    # -- offsets by time, first and last --------------------------------------------------------

    def _timeout(self, timeout_ms):
        return self._api_timeout if timeout_ms is None else timeout_ms / 1000

    def offsets_for_times(self, timestamps, timeout_ms=None):
        """``{TopicPartition: OffsetAndTimestamp or None}``: for each partition, the first
        offset whose record's timestamp is at or after the one given (ms), with that
        timestamp; None when there is none. Blocks up to ``timeout_ms``."""
        _check_partitions(list(timestamps))
        for tp, timestamp in timestamps.items():
            if timestamp < 0:
                raise ValueError(f"The target time for partition {tp} is {timestamp}. The "
                                 f"target time cannot be negative.")
        found = self._offsets.offsets_by_times(
            {tp: int(ts) for tp, ts in timestamps.items()}, self._timeout(timeout_ms))
        return {tp: None if value is None else OffsetAndTimestamp(*value)
                for tp, value in found.items()}

    def beginning_offsets(self, partitions, timeout_ms=None):
        """``{TopicPartition: the first offset}`` (the log start offset) of ``partitions``;
        positions are not changed."""
        partitions = list(partitions)
        _check_partitions(partitions)
        return self._offsets.offsets_at(partitions, EARLIEST, self._timeout(timeout_ms))

    def end_offsets(self, partitions, timeout_ms=None):
        """``{TopicPartition: the offset after the last}`` (the high watermark) of
        ``partitions``; positions are not changed."""
        partitions = list(partitions)
        _check_partitions(partitions)
        return self._offsets.offsets_at(partitions, LATEST, self._timeout(timeout_ms))

    # -- metadata -------------------------------------------------------------------------------

    def topics(self, timeout_ms=None):
        """The names of every topic in the cluster (a set; internal ones left out when
        ``exclude_internal_topics``), asked from the brokers now."""
        self._client.wait_for_metadata(self._timeout(timeout_ms), all_topics=True)
        exclude = self.config["exclude_internal_topics"]
        return {name for name, info in self._client.cluster.topics.items()
                if not info.error_code and not (exclude and info.is_internal)}

    def partitions_for_topic(self, topic, timeout_ms=None):
        """The partition ids of ``topic`` (a set; empty if it does not exist)."""
        partitions = self._client.cluster.partitions_for_topic(topic)
        if partitions is None:
            self._client.wait_for_metadata(self._timeout(timeout_ms), all_topics=True)
            partitions = self._client.cluster.partitions_for_topic(topic)
        return partitions or set()

    def metrics(self, raw=False):
        """kafka-python's consumer metrics, ``{group: {name: value}}``:
        ``consumer-fetch-manager-metrics`` (``fetch_metrics``) and, with a group_id,
        ``consumer-coordinator-metrics`` (``coordinator_metrics``); None when
        metrics_enabled is False; ``raw`` is accepted for kafka-python's signature and
        changes nothing."""
        if not self.config["metrics_enabled"]:
            return None
        groups = self._metrics.snapshot()
        if self._coordinator is not None:
            groups.update(self._coordinator.metrics.snapshot(
                len(self._subscription.assigned_partitions())))
        return groups

    # -- group offsets --------------------------------------------------------------------------

    def _group(self):
        if self._coordinator is None:
            raise IllegalStateError("Requires group_id")
        return self._coordinator

    @staticmethod
    def _check_offsets(offsets):
        if offsets is None:
            return None
        offsets = dict(offsets)
        _check_partitions(list(offsets))
        for tp, value in offsets.items():
            if isinstance(value, int) and not isinstance(value, bool):
                offsets[tp] = OffsetAndMetadata(value, "", -1)
            elif not isinstance(value, OffsetAndMetadata):
                raise TypeError(f"offsets[{tp}] must be an OffsetAndMetadata, found "
                                f"{value!r}")
        return offsets

    def commit(self, offsets=None, timeout_ms=None):
        """Commit ``offsets`` (``{TopicPartition: OffsetAndMetadata}``; default: the
        position of every assigned partition) to the group, blocking until done:
        CommitFailedError if the group rebalanced meanwhile, KafkaTimeoutError after
        ``timeout_ms`` (default ``default_api_timeout_ms``); IllegalStateError without a
        group_id."""
        self._group().commit_sync(self._check_offsets(offsets), self._timeout(timeout_ms))

    def commit_async(self, offsets=None, callback=None):
        """Send the commit and return a Future of the offsets; ``callback(offsets,
        response_or_exception)`` runs in a later poll (default:
        ``default_offset_commit_callback``)."""
        return self._group().commit_async(self._check_offsets(offsets), callback)

    def group_metadata(self):
        """This member's ConsumerGroupMetadata (Java's ``groupMetadata()``): group id,
        generation, member id and instance id as the last completed join left them — kept
        after the member leaves or is removed, so the coordinator refuses a zombie's
        transactional offsets (KIP-447); IllegalStateError without a group_id."""
        generation, member_id = self._group().membership()
        return ConsumerGroupMetadata(self.config["group_id"], generation, member_id,
                                     self.config["group_instance_id"])

    def committed(self, partition, metadata=False, timeout_ms=None):
        """The group's committed offset of ``partition`` (None if none); an
        OffsetAndMetadata when ``metadata``. Blocks up to ``timeout_ms``."""
        if not isinstance(partition, TopicPartition):
            raise TypeError(f"partition must be a TopicPartition namedtuple, found "
                            f"{partition!r}")
        found = self._group().fetch_committed([partition], self._timeout(timeout_ms))
        committed = found.get(partition)
        if committed is None or metadata:
            return committed
        return committed.offset

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self, autocommit=True, timeout_ms=None):
        """Close the connections (unlinking their rings) and the deserializers; safe to
        call twice. A group member first commits its positions (``autocommit`` and
        ``enable_auto_commit``, up to ``timeout_ms``), revokes its partitions and leaves the
        group (a static member does not leave)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._coordinator is not None:
                self._coordinator.close(autocommit, None if timeout_ms is None
                                        else timeout_ms / 1000)
        finally:
            self._close_client()

    def _close_client(self):
        try:
            self._fetcher.close()
            self._client.close()
        finally:  # the stats page goes last: nothing of it may keep a connection open
            self._stats.close()
        for name in ("key_deserializer", "value_deserializer"):
            closer = getattr(self.config[name], "close", None)
            if callable(closer):
                closer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"KafkaConsumer(bootstrap_servers={self.config['bootstrap_servers']!r}, "
                f"assignment={sorted(self._subscription.assignment)})")
