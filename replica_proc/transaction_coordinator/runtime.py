"""The transaction coordinator inside the broker: ``__transaction_state`` and the I/O around
the ``TransactionCoordinator`` state machine (``transaction_coordinator.coordinator``,
whose module doc is the contract this module fulfils).

**The topic.** ``coordinator_node(transactional_id)`` is FindCoordinator's answer: the
leader of ``__transaction_state`` partition ``partition_for(transactional_id)``; the first
request that finds no such topic creates it through the controller
(``coordinator_common.topic.CoordinatorTopic.transaction_log``); COORDINATOR_NOT_AVAILABLE until
it exists and the id's partition has a leader.

**Leadership and the store** are ``coordinator_common.log.CoordinatorLog``'s, as for the group
coordinator: a ``__transaction_state`` partition this broker comes to lead is read to its
LEO and loaded (``begin_load`` then ``load`` at the partition's leader epoch, the
coordinator epoch); the transactions it finds half-finished (PrepareCommit /
PrepareAbort) get their markers sent at once; a partition it no longer leads is
unloaded. Writes are appended with acks=all, waiting for their replication at most
``REPLICATION_TIMEOUT_MS`` (Kafka's coordinator waits ``request.timeout.ms``); loading
reads ``transaction.state.log.load.buffer.size`` bytes at a time.

**Driving the coordinator.** ``run(result, respond)`` does a Result's I/O: the answer
goes to ``respond(Answer)`` (None: nobody asked), each write is stored and its outcome
given to ``write_done`` (whose Result is run in turn, with the same ``respond``), the
markers go to the ``TxnMarkerSender`` and their codes to ``markers_done``.

**Waiting for a completion.** ``call_after_completion(transactional_id, operation,
respond)`` (AddPartitionsToTxn, AddOffsetsToTxn) runs ``operation`` as ``run`` does,
unless it is refused only because the id's previous transaction is still writing its
markers and Complete* record: then it waits for that, at most ``RETRY_BACKOFF_MS``
(``transaction_coordinator.completion_waits``, woken by each write of the id).

**Timers.** ``expire(now)`` answers writes whose time ran out and calls that waited their
longest for a completion, reads the markers' answers and runs the coordinator's ``poll``
(timed-out transactions, expired ids, retries); ``next_deadline()`` is the earliest of
the writes', the waiting calls' and, while this broker leads a ``__transaction_state``
partition, the coordinator's (its wall-clock milliseconds turned into the loop's
monotonic seconds).

Owner: the broker's loop thread, the only caller.
"""
from __future__ import annotations

from cluster.metadata.model import GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC
from replica_proc.coordinator_common.log import CoordinatorLog
from replica_proc.coordinator_common.topic import CoordinatorTopic
from replica_proc.transaction_coordinator.completion_waits import CompletionWaits
from replica_proc.transaction_coordinator.coordinator import (
    RETRY_BACKOFF_MS,
    TransactionCoordinator,
)
from replica_proc.transaction_coordinator.marker_sender import TxnMarkerSender
from segments.clock import wall_clock_ms

#: How long a ``__transaction_state`` write waits for its replication (Kafka's coordinator
#: uses ``request.timeout.ms``, 30 s by default).
REPLICATION_TIMEOUT_MS = 30_000


class TransactionRuntime:
    """The broker's transaction coordinator and its ``__transaction_state`` partitions
    (module doc).

    ``broker_id``, ``cluster_id``; ``replicas``: the ReplicaManager; ``metadata``: the
    BrokerMetadata; ``create_topic``: ``AdminHandler.create_topic``; ``producer_ids``:
    the ProducerIdManager; ``markers``: this broker's WriteTxnMarkersHandler; ``clock``:
    the loop's monotonic seconds; ``on_append`` / ``on_high_watermark``: the request
    handler's hooks an append must call, as a Produce's does; ``connector``: the marker
    sender's (``TxnMarkerSender``).
    """

    def __init__(self, broker_id, cluster_id, config, replicas, metadata, create_topic,
                 producer_ids, markers, clock, on_append, on_high_watermark, connector=None):
        self._metadata = metadata
        self._topic = CoordinatorTopic.transaction_log(config, metadata, create_topic)
        self._clock = clock
        self._clock_ms = clock_ms = replicas.clock or wall_clock_ms
        self.log = CoordinatorLog(
            TRANSACTION_STATE_TOPIC, replicas, clock, clock_ms, on_append,
            on_high_watermark, config["transaction.state.log.load.buffer.size"],
            REPLICATION_TIMEOUT_MS, self._load, self._unload)
        self.coordinator = TransactionCoordinator(
            config, producer_ids.generate_producer_id, clock_ms)
        self.sender = TxnMarkerSender(cluster_id, broker_id, metadata, markers, connector,
                                      clock=clock)
        self._waits = CompletionWaits(self.coordinator, self.run, clock,
                                      RETRY_BACKOFF_MS / 1000)
        self._led = set()  # the __transaction_state partitions loaded here

    # -- the topic --------------------------------------------------------------------------

    def topic(self):
        """``__transaction_state``'s TopicInfo, or None after asking the controller to
        create it."""
        return self._topic.info()

    def coordinator_node(self, transactional_id):
        """``(error code, message, node id)`` of ``transactional_id``'s coordinator."""
        return self._topic.coordinator_node(transactional_id)

    # -- leadership -------------------------------------------------------------------------

    def on_change(self, keys):
        """Partitions in ``keys`` changed: answer the writes that completes, then load the
        ``__transaction_state`` partitions this broker came to lead, unload the others."""
        topics = self._metadata.image.topics
        info = topics.get(TRANSACTION_STATE_TOPIC)
        if info is not None:
            self.coordinator.partitions_count = len(info.partitions)
        info = topics.get(GROUP_METADATA_TOPIC)
        if info is not None:  # AddOffsetsToTxn's partition of a group
            self.coordinator.offsets_partitions_count = len(info.partitions)
        self.log.on_change(keys)

    def _load(self, index, leader_epoch, stored):
        self._led.add(index)
        self.coordinator.begin_load(index, leader_epoch)
        self.run(self.coordinator.load(index, leader_epoch, stored))

    def _unload(self, index):
        self._led.discard(index)
        self.coordinator.unload(index)
        self._waits.unloaded(index)

    # -- driving the coordinator -------------------------------------------------------------

    def run(self, result, respond=None):
        """Do ``result``'s I/O (module doc)."""
        if result.response is not None and respond is not None:
            respond(result.response)
        for write in result.writes:
            self.log.store(write.partition, [(write.key, write.value)],
                           lambda code, write=write: self._write_done(write, code, respond))
        if result.markers:
            self.sender.send(result.markers, self._markers_done)

    def call_after_completion(self, transactional_id, operation, respond):
        """Run ``operation()``'s Result for ``respond``, after the completion of the id's
        previous transaction if that is what refuses it (module doc)."""
        self._waits.call(transactional_id, operation, respond)

    def _write_done(self, write, code, respond):
        self.run(self.coordinator.write_done(write, code), respond)
        self._waits.written(write.transactional_id)

    def _markers_done(self, marker, codes, gone):
        self.run(self.coordinator.markers_done(marker, codes, gone=gone))

    # -- appends and timers ------------------------------------------------------------------

    def on_high_watermark(self, key):
        """The HW of ``key`` moved: call back the writes it replicated."""
        self.log.on_high_watermark(key)

    def expire(self, now):
        """Answer the writes whose time ran out and the calls that waited their longest;
        read the markers' answers; run the coordinator's due timers."""
        self.log.expire(now)
        self._waits.expire(now)
        self.sender.poll()
        if self._led:  # a broker that coordinates nothing has no timers
            self.run(self.coordinator.poll())

    def next_deadline(self):
        """The earliest deadline, in the loop's monotonic seconds, or None (the
        coordinator's timers count only while this broker leads a partition of
        ``__transaction_state``)."""
        deadlines = []
        if self._led:
            due_ms = self.coordinator.next_deadline()
            deadlines.append(self._clock() + max(0, due_ms - self._clock_ms()) / 1000)
        if (deadline := self.log.next_deadline()) is not None:
            deadlines.append(deadline)
        if (deadline := self._waits.next_deadline()) is not None:
            deadlines.append(deadline)
        return min(deadlines) if deadlines else None

    def close(self):
        """Close the markers' connections."""
        self.sender.close()
