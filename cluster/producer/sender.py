"""The producer's Sender: the thread that moves batches from the accumulator to the brokers.

Each turn of the loop (Kafka's ``Sender.runOnce``):

1. fail the batches older than ``delivery_timeout_ms`` (queued or in flight) with
   KafkaTimeoutError naming the partition;
2. ask the accumulator which brokers lead partitions with sendable batches; topics whose
   leader is unknown trigger a metadata refresh;
3. for each such broker that is connected (or connects now) and has fewer than
   ``max_in_flight_requests_per_connection`` requests in flight, drain its batches, build
   each once (``ProducerBatch.build``: one encode, one CRC-32C) and write one Produce
   request — framed by the producer's ``ProduceFrame`` (its header and fixed fields encoded
   once; no request objects) straight into a request-ring slot by the client, its
   per-batch figures recorded once per request;
4. ``client.poll()``: wait for responses, the next linger deadline, or a wake-up from
   ``send()`` (a new or full batch), whichever comes first — a wake-up while requests are
   in flight waits up to ``client.MULTI_WAIT_SLICE`` for their response first, so the new
   batches go out together (``client.Wakeup``); close wakes it at once.

Each turn drains up to ``max_in_flight_requests_per_connection`` requests per broker at once
(the same batches, in the same order, as that many turns would drain: at most one batch per
partition per request), so the per-turn costs — the accumulator's scans, a GIL hand-over
from the threads calling ``send()`` — are paid once for a burst, and expiry is looked for
only when the oldest batch can have expired.

A response completes its batches (offset, log-append time) or, for a retriable error while
``retries`` and the delivery timeout allow, puts them back at the front of their deque after
``retry_backoff_ms``, to be sent again to the leader the metadata then names. Retriable
(``cluster.errors``' flags, as Kafka's): NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH, KAFKA_STORAGE_ERROR and the other
invalid-metadata errors — these request a metadata refresh (Kafka's InvalidMetadataException
rule), and the retry waits for its answer (``RecordAccumulator.reenqueue``) — and
NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT, UNKNOWN_LEADER_EPOCH, retried without
one. A broker that died or closed its end (PeerDiedError / PeerClosedError) or did not
answer within ``request_timeout_ms`` fails the requests in flight on that connection
(KafkaConnectionError / RequestTimedOutError from the client, which drops the connection and
requests a metadata refresh): their batches are retried the same way. The outcome of such a
request is unknown — the broker may have appended the batch before it died — so without
idempotence (``enable_idempotence=False``) a retry may write a duplicate: at-least-once,
as Kafka's producer with ``enable.idempotence=false``. A batch still failing when
``delivery_timeout_ms`` has passed since its creation fails with KafkaTimeoutError
("Expiring N record(s) for T-P: X ms has passed since batch creation"), saying why the
partition has no leader when it has none ("partition t-1 has no leader: its only replica,
broker 1, is stopped") and naming the error of its last attempt (its ``__cause__``). With
acks=0 the broker sends no response: batches complete (offset -1) once their request is
written. With
``max_in_flight_requests_per_connection=1`` a partition with a batch in flight is not
drained again until it completes, and a retried batch goes back in front of the newer ones,
so retries cannot reorder it (kafka-python's ``guarantee_message_order``); with more
requests in flight retries may reorder records, as in Kafka without idempotence.

The idempotent producer (``enable_idempotence``, kafka-python's default; a
``TransactionManager``): before any batch is drained the sender gets a producer id with
an InitProducerId request (v1, no transactional id) to the least loaded broker, retried
after ``retry_backoff_ms`` while the answer is a retriable error (a broker still waiting
for its block of ids answers COORDINATOR_LOAD_IN_PROGRESS); any other error is fatal.
The accumulator stamps each batch as it drains it (producer id, epoch, sequence) and keeps
each partition's order across retries (``transaction_manager`` has the rules);
DUPLICATE_SEQUENCE_NUMBER completes a batch, OUT_OF_ORDER_SEQUENCE_NUMBER and
UNKNOWN_PRODUCER_ID are retried (bumping the epoch when the leader really lost batches),
and INVALID_PRODUCER_EPOCH fails the batch and every later one. A retry sends the same
bytes, which the leader recognises: a batch whose first attempt was appended is not
appended again.

Moved leaders (beyond Kafka). When a metadata update names another leader for a partition
whose idempotent batches are in a request still in flight (its leader hung: SIGSTOP,
swapped out; the client refreshes as soon as the controller publishes, ``KafkaClient``),
those batches are taken out of that request and put back in front of their deque with no
backoff, so the next turn sends them to the new leader — Kafka waits out
``request_timeout_ms`` first. The sequence numbers make it safe, as for any retry: a batch
the old leader had appended and replicated is recognised by the new one as a duplicate,
one it had not replicated is truncated from it when it follows again. The old request's
late answer (or failure) then covers only the batches it still carries, so each batch
completes once. Without idempotence batches wait, as in Kafka: a resend could duplicate.
The check runs once per metadata update, over the requests in flight.

The transactional producer (``transactional_id``): instead of that InitProducerId, each
turn first runs ``_transaction_step``: it handles the answer of the one coordinator
request in flight, or sends the next (``txn_requests`` builds them and sorts their
errors): FindCoordinator when the coordinator is unknown, AddPartitionsToTxn for the
partitions whose batches wait to be added (``may_drain`` holds them back), then the
TransactionManager's queue — InitProducerId, AddOffsetsToTxn, TxnOffsetCommit (to the
group's coordinator), EndTxn once no batch is queued or in a request. While a transaction
is being aborted the batches not yet sent fail; Produce requests carry the transactional
id. A graceful close (``initiate_close``) first sends what is queued, then aborts a
transaction still open and runs until its EndTxn is answered (as Java's ``Sender``; a
commit or abort already under way is finished instead), so read_committed consumers
never wait for ``transaction.timeout.ms`` and the next producer with the same
transactional id starts at once; the KafkaProducer bounds this by close's timeout, after
which (or at once with timeout 0) ``force_close`` leaves the transaction open.

Thread safety: the Sender thread alone runs the loop, owns the KafkaClient, and completes
batches (so callbacks and errbacks run there, as in kafka-python); ``wakeup()``,
``initiate_close()`` and ``force_close()`` may be called from any thread; ``metrics`` is
written by the sender and read by anyone.
"""
from __future__ import annotations

import datetime
import logging
import math
import threading
import time

from cluster.client.kafka_client import API_VERSIONS, Wakeup
from cluster.errors import (
    IllegalStateError,
    KafkaError,
    KafkaProtocolError,
    KafkaTimeoutError,
    for_code,
)
from cluster.producer import transaction_manager as tm, txn_requests
from cluster.producer.producer_metrics import SenderMetrics
from cluster.protocol import frames as protocol
from cluster.protocol.batch_bodies import ProduceFrame
from cluster.protocol.frames import ApiKey

log = logging.getLogger(__name__)

#: Longest the loop waits with nothing to do (it wakes earlier for any work).
IDLE_WAIT = 0.5

_INIT_PRODUCER_ID_VERSION = API_VERSIONS[ApiKey.INIT_PRODUCER_ID]


class Sender(threading.Thread):
    """The producer's network thread (module doc). Started by the KafkaProducer."""

    def __init__(self, client, accumulator, config, *, clock=time.monotonic,
                 transaction_manager=None):
        super().__init__(name=f"ringlog-producer-network-thread | {client.client_id}",
                         daemon=True)
        self._client = client
        self._accumulator = accumulator
        self._clock = clock
        self._acks = config["acks"]
        self._retries = config["retries"]
        self._retry_backoff = config["retry_backoff_ms"] / 1000
        self._delivery_timeout = config["delivery_timeout_ms"] / 1000
        # How the retry WARNING counts: "attempt 2 of 4", or until the delivery timeout.
        self._attempts_of = (f" of {self._retries + 1}" if self._retries != math.inf else
                             f", until delivery_timeout_ms {config['delivery_timeout_ms']}")
        self._retry_logged = {}  # TopicPartition -> (attempts, clock) of the last retry logged
        self._request_timeout = datetime.timedelta(milliseconds=config["request_timeout_ms"])
        self._max_request_size = config["max_request_size"]
        self._max_in_flight = config["max_in_flight_requests_per_connection"]
        self._guarantee_order = self._max_in_flight == 1
        protocol.load_codecs(ApiKey.PRODUCE)  # the response's too: not at the first answer
        self._txn = transaction_manager  # None: not idempotent
        self._init_future = None  # the InitProducerId request in flight
        self._txn_call = None  # the transactional call in flight: _TxnCall
        self._txn_retry_at = 0.0
        self._transactional_id = None if transaction_manager is None else \
            transaction_manager.transactional_id
        # Every Produce request of this producer shares its header and first fields.
        self._frame = ProduceFrame(ApiKey.PRODUCE, API_VERSIONS[ApiKey.PRODUCE],
                                   client.client_id, self._transactional_id, self._acks,
                                   round(self._request_timeout.total_seconds() * 1000))
        self._init_retry_at = 0.0
        self._transaction_timeout = datetime.timedelta(
            milliseconds=config["transaction_timeout_ms"])
        self._in_flight = {}     # batch -> broker id, for every batch in a request in flight
        self._pending = []       # (future, node, batches, sent at) per request not yet handled
        self._acked = []         # (batch, base offset, append time): acked, not completed
        self._leaders_checked = 0  # the metadata version in-flight batches were checked at
        self._next_expiry = 0.0  # clock value before which no batch can expire
        self._muted = set()      # TopicPartitions in flight (only with guaranteed order)
        self._wakeup = Wakeup()
        self._running = True
        self._forced = False
        self._aborting = False
        self.metrics = SenderMetrics(config["metrics_num_samples"],
                                     config["metrics_sample_window_ms"] / 1000, clock)
        self.failure = None      # what killed the loop, if anything did

    # -- any thread --------------------------------------------------------------------------

    def wakeup(self):
        """There is new work (a batch opened or filled, a flush, a metadata need)."""
        self._wakeup.set()

    def initiate_close(self):
        """Stop once everything queued and in flight is done, and a transaction still
        open is aborted (its EndTxn answered; ``TransactionManager.begin_abort_at_close``)."""
        self._running = False
        self._accumulator.close()
        self._wakeup.set(urgent=True)

    def force_close(self):
        """Stop now: fail what is queued or in flight with IllegalStateError; an open
        transaction is left to the coordinator's ``transaction.timeout.ms``."""
        self._forced = True
        self.initiate_close()

    # -- the loop ----------------------------------------------------------------------------

    def run(self):
        accumulator, client = self._accumulator, self._client
        try:
            while self._running:
                self.run_once()
            while not self._forced and (accumulator.has_undrained()
                                        or client.in_flight_count() or self._in_flight):
                self.run_once()
            txn = self._txn
            if txn is not None and txn.transactional_id is not None:
                while not self._forced and txn.begin_abort_at_close():
                    self.run_once()
        except BaseException as exc:
            log.exception("the producer's sender thread failed")
            self.failure = exc
        finally:
            self._abort(IllegalStateError("Producer is closed forcefully.")
                        if self.failure is None else self.failure)

    def _abort(self, error):
        """Fail everything still queued or in flight with ``error``; close the client."""
        self._aborting = True
        if self._txn is not None and self._txn.transactional_id is not None:
            self._txn.close(error)
        self._client.close()  # in-flight requests fail; their batches come to _retry_or_fail
        self._handle_completed()
        for batch in list(self._in_flight):
            self._fail(batch, error)
        for batch in self._accumulator.drain_all():
            self._fail(batch, error)

    def run_once(self):
        """One turn of the loop (module doc)."""
        accumulator, client = self._accumulator, self._client
        self._wakeup.clear()
        now = self._clock()
        if now >= self._next_expiry:
            self._expire(now)
        txn = self._txn
        txn_delay = None
        if txn is not None:
            if txn.transactional_id is not None:
                txn_delay = self._transaction_step(now)
            elif not self._idempotence_ready(txn, now):
                return
        cluster = client.cluster
        topics = cluster.topics
        nodes, unknown, delay = accumulator.ready(now, topics, cluster.answered)
        if txn_delay is not None:
            delay = txn_delay if delay is None else min(delay, txn_delay)
        if unknown:
            cluster.add_topics(unknown)
            cluster.request_update()
        slots = {}
        for node in nodes:
            free = self._max_in_flight - client.in_flight_count(node)
            if free <= 0:
                continue  # its responses will wake the poll below
            if client.is_ready(node):
                slots[node] = free
            else:
                wait = client.connection_delay(node)
                delay = wait if delay is None else min(delay, wait)
        if slots:
            drained = accumulator.drain_requests(now, topics, slots, self._max_request_size,
                                                 self._muted, cluster.answered)
            if drained:
                self._send(drained, now)
            for entry in self._pending:
                if entry[0].is_done:
                    delay = 0.0  # acks=0 (done once written), or a request that failed at once
                    break
            if txn_delay is None and self._transactional_id is not None and \
                    self._txn_call is None and txn.partitions_waiting:
                delay = 0.0  # the drain noted partitions to add: AddPartitionsToTxn now
        client.poll(IDLE_WAIT if delay is None else delay, wakeup=self._wakeup)
        self._handle_completed()
        if cluster.version != self._leaders_checked:
            self._leaders_checked = cluster.version
            if self._pending and txn is not None:
                self._move_to_new_leaders()

    def _move_to_new_leaders(self):
        """Take the idempotent batches whose partition has another leader now out of the
        requests in flight and queue them again at once (module doc: moved leaders)."""
        cluster = self._client.cluster
        moved = []
        for future, node, batches, _ in self._pending:
            if future.is_done:
                continue
            staying = [b for b in batches if cluster.leader_for(b.topic, b.partition) in (-1, node)]
            if len(staying) < len(batches):
                moved += [b for b in batches if b not in staying]
                batches[:] = staying  # the late answer covers these only
        if not moved:
            return
        now = self._clock()
        txn = self._txn
        for batch in moved:
            txn.request_done(batch)
            self._in_flight.pop(batch, None)
            self._muted.discard(batch.topic_partition)
            log.info("%s-%d has a new leader, broker %d: its batch of sequence %d is sent "
                     "there now, without waiting for the old leader's answer", batch.topic,
                     batch.partition, cluster.leader_for(batch.topic, batch.partition),
                     batch.base_sequence)
            self._accumulator.reenqueue(batch, now)

    # -- the idempotent producer --------------------------------------------------------------

    def _idempotence_ready(self, txn, now):
        """Bump the epoch if asked; fail what is queued after a fatal error; get a producer
        id if there is none (polling the client meanwhile). True if batches may be
        drained in this turn."""
        if txn.fatal_error is not None:
            for batch in self._accumulator.drain_all():
                self._fail(batch, txn.fatal_error)
        else:
            txn.maybe_bump_epoch()
            if txn.has_producer_id:
                return True
            delay = self._init_producer_id(txn, now)
        self._client.poll(IDLE_WAIT if txn.fatal_error is not None else delay,
                          wakeup=self._wakeup)
        self._handle_completed()
        return False

    def _init_producer_id(self, txn, now):
        """Send InitProducerId or handle its answer; the seconds to wait before the next
        step."""
        future = self._init_future
        if future is not None:
            if not future.is_done:
                return IDLE_WAIT  # its answer ends the poll
            self._init_future = None
            error = future.exception
            if error is None:
                response = future.value
                if not response.error_code:
                    txn.set_producer_id_and_epoch(response.producer_id,
                                                  response.producer_epoch)
                    return 0.0
                cls = for_code(int(response.error_code))
                error = cls(f"InitProducerId: {cls.description}")
            if not getattr(error, "retriable", False):
                txn.set_fatal(error)
                return 0.0
            log.info("InitProducerId to be sent again: %s", error)
            self._init_retry_at = now + self._retry_backoff
        if now < self._init_retry_at:
            return self._init_retry_at - now
        client = self._client
        node = client.least_loaded_node()
        if node is None or not client.is_ready(node):
            self._init_retry_at = now + self._retry_backoff
            return self._retry_backoff
        request = protocol.request_class(ApiKey.INIT_PRODUCER_ID, _INIT_PRODUCER_ID_VERSION)(
            transactional_id=None, transaction_timeout=self._transaction_timeout)
        self._init_future = client.send(node, request)
        return 0.0 if self._init_future.is_done else IDLE_WAIT

    # -- the transactional producer -----------------------------------------------------------

    def _transaction_step(self, now):
        """Handle the answer of the transactional call in flight, or send the next one
        (``cluster.producer.txn_requests``): FindCoordinator first when the coordinator is
        unknown, AddPartitionsToTxn for the partitions ``may_drain`` noted, then the
        manager's queue (EndTxn once no batch is queued or in a request). Fails the batches
        not yet sent while the transaction is being aborted, and everything after a fatal
        error. Returns the seconds until this step has more to do (None: an answer or new
        work will wake the loop)."""
        txn = self._txn
        if txn.fatal_error is not None or txn.aborting:
            error = txn.fatal_error or txn.last_error or KafkaError(
                f"TransactionalId {txn.transactional_id}: the transaction is being aborted")
            for batch in self._accumulator.drain_all():
                self._fail(batch, error)
        if txn.fatal_error is not None:
            return None
        call = self._txn_call
        if call is not None:
            if not call.future.is_done:
                return None
            self._txn_call = None
            self._txn_answer(call, now)
            if txn.fatal_error is not None:
                return 0.0
        if now < self._txn_retry_at:
            return self._txn_retry_at - now
        partitions = txn.take_partitions_to_add()
        request = None
        if not partitions:
            request = txn.next_request(idle=not self._in_flight
                                       and not self._accumulator.has_undrained())
            if request is None:
                return None
            if request.kind == tm.END_TXN and not txn.transaction_started:
                txn.call_done(request)  # nothing to end at the coordinator
                return 0.0
        if request is not None and request.kind == tm.TXN_OFFSET_COMMIT:
            key, key_type = request.group_id, txn_requests.GROUP_KEY
            node = txn.group_coordinators.get(key)
        else:
            key, key_type = txn.transactional_id, txn_requests.TRANSACTION_KEY
            node = txn.coordinator
        client = self._client
        if node is None:
            kind, body = txn_requests.FIND_COORDINATOR, txn_requests.find_coordinator(
                key, key_type)
            node = client.least_loaded_node()
        elif partitions:
            kind, body = txn_requests.ADD_PARTITIONS, txn_requests.add_partitions(
                txn, partitions)
        else:
            kind, body = request.kind, txn_requests.build(txn, request)
        if node is None:
            self._txn_retry_at = now + self._retry_backoff
            return self._retry_backoff
        if not client.is_ready(node):  # gone or not reachable: ask who coordinates now
            if kind != txn_requests.FIND_COORDINATOR:
                self._forget_coordinator(key, key_type)
            self._txn_retry_at = now + max(self._retry_backoff, client.connection_delay(node))
            return self._txn_retry_at - now
        self._txn_call = _TxnCall(client.send(node, body), kind, request, partitions, key,
                                  key_type)
        return 0.0 if self._txn_call.future.is_done else None

    def _txn_answer(self, call, now):
        """Act on the answer to a transactional call (``txn_requests.decide``)."""
        txn = self._txn
        error = call.future.exception
        response = call.future.value if error is None else None
        if error is None:
            error = txn_requests.response_error(call.kind, response)
        if error is None:
            if call.kind == txn_requests.FIND_COORDINATOR:
                if call.key_type == txn_requests.GROUP_KEY:
                    txn.group_coordinators[call.key] = response.node_id
                else:
                    txn.coordinator = response.node_id
            elif call.kind == txn_requests.ADD_PARTITIONS:
                txn.partitions_added(call.partitions)
                self._wakeup.set()
            else:
                if call.kind == tm.INIT:
                    txn.set_producer_id_and_epoch(response.producer_id,
                                                  response.producer_epoch)
                txn.call_done(call.request)
            return
        decision, error = txn_requests.decide(call.kind, error)
        log.info("%s for transactional id %s: %s (%s)", call.kind, txn.transactional_id,
                 error, decision)
        if decision == txn_requests.FATAL:
            txn.set_fatal(error)
        elif decision == txn_requests.ABORTABLE:
            if call.request is None:
                txn.set_abortable(error)
            else:
                txn.call_done(call.request, error)
        else:
            if decision == txn_requests.REDISCOVER or call.kind == \
                    txn_requests.FIND_COORDINATOR:
                self._forget_coordinator(call.key, call.key_type)
            self._txn_retry_at = now + txn_requests.retry_backoff(
                call.kind, error, not txn.transaction_started, self._retry_backoff)

    def _forget_coordinator(self, key, key_type):
        if key_type == txn_requests.GROUP_KEY:
            self._txn.group_coordinators.pop(key, None)
        else:
            self._txn.coordinator = None

    # -- produce requests ----------------------------------------------------------------------

    def _send(self, drained, now):
        """Build the batches of each request in ``drained`` (``{node: [[batches], ...]}``,
        ``RecordAccumulator.drain_requests``) and write each as one Produce request (framed
        by ``ProduceFrame``: no request objects). The per-batch and per-request figures are
        recorded once per turn (``SampledStat.record_many`` at the turn's clock: the same
        figures as one record per batch or per request)."""
        requests = batches_sent = records = size = largest = built = 0
        request_largest = request_records_max = 0
        queue_total = queue_max = rate_total = rate_max = 0.0
        in_flight = self._in_flight
        muted = self._muted if self._guarantee_order else None
        send_produce, frame = self._client.send_produce, self._frame
        expect_response = self._acks != 0
        pending = self._pending
        for node, node_requests in drained.items():
            for batches in node_requests:
                by_topic = {}
                sent = []
                request_size = request_records = 0
                for batch in batches:
                    data = batch.built
                    if data is None:  # its first request: built now
                        uncompressed = batch.builder.size_in_bytes()
                        try:
                            data = batch.build()
                        except Exception as exc:
                            if self._txn is not None:
                                self._txn.request_done(batch)
                            self._fail(batch, exc)
                            continue
                        length = len(data)
                        built += 1
                        queued = (now - batch.created) * 1000
                        rate = length / uncompressed
                        queue_total += queued
                        rate_total += rate
                        if queued > queue_max:
                            queue_max = queued
                        if rate > rate_max:
                            rate_max = rate
                    else:
                        length = len(data)
                    if length > largest:
                        largest = length
                    request_records += batch.record_count
                    batch.attempts += 1
                    sent.append(batch)
                    request_size += length
                    parts = by_topic.get(batch.topic)
                    if parts is None:
                        by_topic[batch.topic] = parts = []
                    parts.append((batch.partition, data))
                    in_flight[batch] = node
                    if muted is not None:
                        muted.add(batch.topic_partition)
                if not sent:
                    continue
                requests += 1
                batches_sent += len(sent)
                size += request_size
                records += request_records
                if request_size > request_largest:
                    request_largest = request_size
                if request_records > request_records_max:
                    request_records_max = request_records
                future = send_produce(node, frame, tuple(by_topic.items()), expect_response)
                pending.append((future, node, sent, now))
        if not requests:
            return
        metrics = self.metrics
        if built:
            metrics.queue_time.record_many(queue_total, built, queue_max, now)
            metrics.compression_rate.record_many(rate_total, built, rate_max, now)
        metrics.batch_size.record_many(size, batches_sent, largest, now)
        metrics.request_total += requests
        metrics.outgoing_byte_total += size
        metrics.request_size.record_many(size, requests, request_largest, now)
        metrics.request_records.record_many(records, requests, request_records_max, now)

    def _handle_completed(self):
        """Handle the Produce requests whose futures completed, in the order written, at
        one clock reading; the answered requests' latencies and the acknowledged batches'
        figures are recorded once per call (``_finish_acked``), before any future of
        theirs completes."""
        pending = self._pending
        if not pending:
            return
        waiting = []
        done = []
        answered = 0
        latency_total = latency_max = 0.0
        now = self._clock()
        histogram = self.metrics.request_latency_ms
        for entry in pending:
            future = entry[0]
            if not future.is_done:
                waiting.append(entry)
                continue
            done.append(entry)
            if future.exception is None:
                latency = now - entry[3]
                answered += 1
                latency_total += latency
                if latency > latency_max:
                    latency_max = latency
                histogram.record(latency * 1000)
        if not done:
            return
        self._pending = waiting
        if answered:
            metrics = self.metrics
            metrics.request_latency_total += latency_total
            if latency_max > metrics.request_latency_max:
                metrics.request_latency_max = latency_max
            metrics.request_latency.record_many(latency_total * 1000, answered,
                                                latency_max * 1000, now)
        for future, node, batches, _ in done:
            if future.exception is None:
                self._handle_response(node, batches, future.value)
            else:
                self._handle_failure(batches, future.exception)
        if self._acked:
            self._finish_acked(now)

    def _expire(self, now):
        """Fail the batches past the delivery timeout; note when the next one may be."""
        timeout = self._delivery_timeout
        accumulator = self._accumulator
        expired = accumulator.expired(now, timeout)
        oldest = now if accumulator.oldest_created is None else min(
            now, accumulator.oldest_created)
        for batch in self._in_flight:
            if now - batch.created >= timeout:
                expired.append(batch)
            elif batch.created < oldest:
                oldest = batch.created
        self._next_expiry = oldest + timeout  # batches made later expire later still
        for batch in expired:
            self._fail(batch, self._expiry_error(batch, now))

    def _expiry_error(self, batch, now):
        """Kafka's TimeoutException for a batch past ``delivery_timeout_ms``, naming the
        error of its last attempt (also its ``__cause__``) when it was being retried."""
        last = batch.last_error
        no_leader = self._client.cluster.why_no_leader(batch.topic, batch.partition)
        error = KafkaTimeoutError(
            f"Expiring {batch.record_count or batch.builder.record_count} record(s) for "
            f"{batch.topic}-{batch.partition}: {(now - batch.created) * 1000:.0f} ms has "
            f"passed since batch creation (delivery_timeout_ms "
            f"{self._delivery_timeout * 1000:.0f})"
            + ("" if no_leader is None else f"; {no_leader}")
            + ("" if last is None else
               f"; last error after {batch.attempts} attempt(s): {type(last).__name__}: {last}"))
        error.__cause__ = last
        return error

    # -- completions ---------------------------------------------------------------------------

    def _handle_response(self, node, batches, response):
        """Complete, retry or fail the batches of an answered request (its latency is
        recorded by ``_handle_completed``)."""
        if response is None:  # acks=0
            for batch in batches:
                self._complete(batch, -1, -1)
            return
        results = {}
        for topic in response.responses:
            name = topic.name
            for result in topic.partition_responses:
                results[name, result.index] = result
        txn = self._txn
        for batch in batches:
            if txn is not None:
                txn.request_done(batch)
            result = results.get((batch.topic, batch.partition))
            if result is None:
                self._retry_or_fail(batch, KafkaProtocolError(
                    f"broker {node} answered a Produce request without a result for topic "
                    f"{batch.topic!r} partition {batch.partition}"))
            elif not result.error_code:
                append_time = result.log_append_time
                self._complete(batch, result.base_offset, -1 if append_time is None else
                               round(append_time.timestamp() * 1000))
            else:
                cls = for_code(int(result.error_code))
                error = cls(f"topic {batch.topic!r} partition {batch.partition} on broker "
                            f"{node}: {result.error_message or cls.description}")
                if txn is None:
                    self._retry_or_fail(batch, error)
                    continue
                decision = txn.retry_decision(batch, error)
                if decision == tm.DUPLICATE:
                    self._complete(batch, result.base_offset, -1)
                else:
                    self._retry_or_fail(batch, error, retriable=decision == tm.RETRY)

    def _handle_failure(self, batches, error):
        txn = self._txn
        for batch in batches:
            if txn is not None:
                txn.request_done(batch)
            self._retry_or_fail(batch, error)

    def _retry_or_fail(self, batch, error, retriable=None):
        """Retry ``batch`` after ``error`` if it may be (``retriable``: the decision, else
        the error's flag), or fail it."""
        if self._acked:  # earlier answers' callbacks first
            self._finish_acked(self._clock())
        self._in_flight.pop(batch, None)
        self._muted.discard(batch.topic_partition)
        if batch.done.is_done:
            return  # expired while in flight
        now = self._clock()
        if retriable is None:
            retriable = getattr(error, "retriable", False)
        if self._aborting or not retriable or batch.attempts > self._retries:
            self._fail(batch, error)
            return
        batch.last_error = error
        if now - batch.created >= self._delivery_timeout:
            self._fail(batch, self._expiry_error(batch, now))
            return
        ticket = 0
        if getattr(error, "invalid_metadata", False):
            ticket = self._client.cluster.request_update()
        metrics = self.metrics
        metrics.record_retry_total += batch.record_count
        metrics.record_retry.record(batch.record_count)
        logged = self._retry_logged.get(batch.topic_partition)
        if logged is None or logged[0] != batch.attempts or now - logged[1] >= 1.0:
            # one line per event: the batches in flight to a partition fail together
            self._retry_logged[batch.topic_partition] = (batch.attempts, now)
            log.warning("retrying produce to %s-%d (attempt %d%s): %s", batch.topic,
                        batch.partition, batch.attempts + 1, self._attempts_of, error)
        self._accumulator.reenqueue(batch, now + self._retry_backoff, ticket)

    def _complete(self, batch, base_offset, log_append_time):
        """``batch`` was appended at ``base_offset``: acknowledged to the transaction
        manager now; its figures, buffer and future wait in ``_acked`` for
        ``_finish_acked``, which the caller runs before any other batch fails or is retried
        (so callbacks keep the order of the answers)."""
        self._in_flight.pop(batch, None)
        if self._guarantee_order:
            self._muted.discard(batch.topic_partition)
        if batch.done.is_done:
            return
        if self._txn is not None:
            self._txn.acknowledged(batch)
        self._acked.append((batch, base_offset, log_append_time))

    def _finish_acked(self, now):
        """Record the figures of the batches acknowledged since the last call, at clock
        ``now`` — per stat one ``record_many``: the same figures as one record per batch at
        that clock — then give back their buffers and complete their futures, in order
        (the figures first: a caller woken by its future sees its batch counted)."""
        acked, self._acked = self._acked, []
        metrics = self.metrics
        records = size = largest = largest_records = 0
        topics = {}
        for batch, _, _ in acked:
            count = batch.record_count
            length = len(batch.built)
            records += count
            size += length
            if length > largest:
                largest = length
            if count > largest_records:
                largest_records = count
            tally = topics.get(batch.topic)
            if tally is None:
                topics[batch.topic] = [count, length, 1, count, length]
            else:
                tally[0] += count
                tally[1] += length
                tally[2] += 1
                if count > tally[3]:
                    tally[3] = count
                if length > tally[4]:
                    tally[4] = length
        batches = len(acked)
        metrics.record_send_total += records
        metrics.batch_total += batches
        metrics.batch_bytes_total += size
        if largest > metrics.batch_bytes_max:
            metrics.batch_bytes_max = largest
        metrics.record_send.record_many(records, batches, largest_records, now)
        for topic, (count, length, batches, most, longest) in topics.items():
            stats = metrics.topics.get(topic) or metrics.topic(topic)
            stats.records.record_many(count, batches, most, now)
            stats.bytes.record_many(length, batches, longest, now)
        self._accumulator.deallocate_many([entry[0] for entry in acked])
        for batch, base_offset, log_append_time in acked:
            batch.complete(base_offset, log_append_time)

    def _fail(self, batch, error):
        if self._acked:  # earlier answers' callbacks first
            self._finish_acked(self._clock())
        self._in_flight.pop(batch, None)
        self._muted.discard(batch.topic_partition)
        if batch.done.is_done:
            return
        records = batch.record_count or (
            batch.builder.record_count if batch.builder is not None else 0)
        metrics = self.metrics
        metrics.record_error_total += records
        metrics.record_error.record(records)
        metrics.topic(batch.topic).errors.record(records)
        if self._txn is not None:
            self._txn.failed(batch, error)
        self._accumulator.deallocate(batch)
        batch.fail(error)


class _TxnCall:
    """A transactional call in flight: its future, kind (``txn_requests``), the TxnRequest
    it serves (None for FindCoordinator and AddPartitionsToTxn), the partitions it adds,
    and the coordinator key it is for."""

    __slots__ = ("future", "kind", "request", "partitions", "key", "key_type")

    def __init__(self, future, kind, request, partitions, key, key_type):
        self.future, self.kind, self.request = future, kind, request
        self.partitions, self.key, self.key_type = partitions, key, key_type
