"""The copier process of the transactional-copy workload, as Kafka's
``TransactionalMessageCopier`` runs in ``transactions_test`` without group metadata:
copier ``n`` copies partition ``n`` of the input topic to partition ``n`` of the output
topic with a transactional producer whose ``transactional_id`` belongs to that partition
(``transactional_id``), so a new incarnation of the copier fences the old one and takes
its place. (The consumer is assigned its partition rather than subscribed, as in Kafka's
test: the copy is fenced by transactional id alone.) With ``CopierSpec.subscribe`` the
copiers are instead members of the copiers' group (``--subscribe``: KIP-447's pattern,
fenced by the group's generation through TxnOffsetCommit as well): each copies the
partitions the group assigns it, input partition p to output partition p, and sends the
positions of all of them to each transaction; a rebalance (a copier killed or started)
moves partitions between them.

One incarnation, until its stop event is set or it is fenced:

1. ``init_transactions()`` (fences older incarnations; the coordinator aborts what they
   left open), then its consumer (``read_committed``, ``enable_auto_commit=False``, the
   copiers' ``group_id`` for the offsets) seeks to the group's committed offset;
2. per poll that returned records: ``begin_transaction``, one record to the output per
   input record (same key, value ``copy_value``: the input value, the copier, its
   incarnation and the transaction's number), ``send_offsets_to_transaction`` (the
   consumer's position, with ``group_metadata()``), then ``commit_transaction`` — or, for
   a random ``ABORT_SHARE`` of transactions, ``abort_transaction`` (Kafka's
   ``--enable-random-aborts``);
3. an error in a transaction aborts it and seeks back to the committed offset; a
   ProducerFencedError ends the incarnation (Kafka's copier exits on it), and so does an
   error the producer cannot go on from (exit status 1: ``copiers`` starts another);
4. on its stop event, one last transaction commits the consumer's position alone: a
   zombie that has not written since it was fenced learns of it there.

Its history file (``workload.HistoryWriter``; ``c``: the copier, ``i``: the incarnation,
``txn``: the transaction's number in the incarnation)::

    {"op": "init-invoke", "c": n, "i": i, "t": T}           # before init_transactions
    {"op": "init", "c": n, "i": i, "t": T}                  # init_transactions returned
    {"op": "begin", "c": n, "i": i, "txn": k, "t": T}       # before begin_transaction
    {"op": "commit-invoke", ..., "records": R, "offset": O, "offsets": N}
                                                            # before commit_transaction
    {"op": "commit", ..., "records": R, "offset": O, "offsets": N}  # it returned
    {"op": "abort", ..., "records": R, "reason": "..."}     # abort_transaction returned
    {"op": "txn-error", ..., "error": "..."}                # the transaction failed
    {"op": "fenced", ..., "error": "..."}                   # ProducerFencedError
    {"op": "exit", "c": n, "i": i, "error": "..." or null}  # the incarnation ends
    {"op": "poll-error" | "rewind-error", ..., "error": "..."}  # retried

``offset``: the copier's own partition's position sent to the transaction (None: not
assigned to it), ``offsets``: how many partitions' positions were sent; a transaction
with no records and no offsets makes no request at all (its commit is the producer's
alone). A transaction with ``begin`` and no ``commit-invoke`` was never asked to commit: no
record of it may ever be read_committed. One with ``commit-invoke`` and neither
``commit`` nor ``abort`` has an unknown outcome (the coordinator may have logged the
commit before the copier died or was fenced): all of its records or none. ``t``: epoch
seconds, comparable across processes. Incarnations are numbered in the order they were
started, but under load a later one may initialise first: the one whose init_transactions
came last holds the newest epoch and fences the others (``init-invoke`` and ``init`` let
the checker tell that order). Owner: the copier process's main thread.
"""
from __future__ import annotations

import dataclasses
import logging
import random
import sys

from cluster import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from cluster.errors import KafkaError, KafkaTimeoutError, ProducerFencedError
from cluster.stats.publisher import set_process_role
from cluster.tools.chaos.workload import (
    DELIVERY_TIMEOUT_MS,
    MAX_BLOCK_MS,
    MEMBER_SESSION_TIMEOUT_MS,
    REQUEST_TIMEOUT_MS,
    RETRY_PAUSE,
    HistoryWriter,
    client_logging,
    error_name,
)

#: Share of the transactions a copier aborts on purpose.
ABORT_SHARE = 0.1
#: Records a transaction copies at most (the consumer's max_poll_records).
TRANSACTION_RECORDS = 200
#: The copiers' transaction.timeout.ms: the coordinator aborts (and fences) a transaction
#: left open longer, e.g. by a copier that hung.
TRANSACTION_TIMEOUT_MS = 10_000
#: Milliseconds a commit or abort may take (through coordinator failovers) before its
#: outcome is unknown and the incarnation ends.
END_TIMEOUT_MS = 30_000


@dataclasses.dataclass(frozen=True)
class CopierSpec:
    """What one copier incarnation needs: where, what, which copier and incarnation, its
    history file and the seed of its random aborts."""

    bootstrap: str
    input_topic: str
    output_topic: str
    group: str
    copier: int
    incarnation: int
    history: str
    seed: int = 0
    #: subscribe to the input as a member of ``group`` (KIP-447) instead of being
    #: assigned partition ``copier`` (module doc)
    subscribe: bool = False


def transactional_id(input_topic, copier):
    """The transactional id of copier ``copier`` of ``input_topic`` (every incarnation's)."""
    return f"{input_topic}-copier-{copier}"


def copy_value(value, copier, incarnation, txn):
    """The output value of input ``value`` copied by ``copier``'s incarnation
    ``incarnation`` in its transaction ``txn``: ``p0:000123@1.2.45``."""
    return f"{value}@{copier}.{incarnation}.{txn}"


def parse_copy_value(text):
    """(input value, copier, incarnation, txn) of an output value; None for any other."""
    value, sep, origin = text.rpartition("@")
    parts = origin.split(".")
    if not sep or len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return (value, *(int(p) for p in parts))


def copy(spec, stop):
    """Copier process: one incarnation (module doc) until ``stop`` (a multiprocessing
    Event) is set or it is fenced; exit status 1 when it ended on another error."""
    client_logging(spec)
    set_process_role("chaos-copier", f"chaos-copier-{spec.copier}.{spec.incarnation}")
    history = HistoryWriter(spec.history)
    ids = {"c": spec.copier, "i": spec.incarnation}
    copier = None
    error = None
    try:
        copier = Copier(spec, history)
        copier.run(stop)
    except ProducerFencedError as exc:
        history.write(op="fenced", **ids, txn=copier.txn, error=error_name(exc))
    except Exception as exc:  # recorded; the process fails and another incarnation starts
        logging.getLogger(__name__).exception("copier %s.%s failed", spec.copier,
                                              spec.incarnation)
        error = error_name(exc)
    finally:
        history.write(op="exit", **ids, error=error)
        if copier is not None:
            copier.close()
        history.close()
    if error is not None:
        sys.exit(1)


class Copier:
    """One incarnation's consumer, transactional producer and transaction loop (module
    doc). Owner: the copier process's main thread."""

    def __init__(self, spec, history):
        self.spec = spec
        self.history = history
        self.ids = {"c": spec.copier, "i": spec.incarnation}
        self.partition = TopicPartition(spec.input_topic, spec.copier)
        self.rng = random.Random(f"{spec.seed}/{spec.copier}/{spec.incarnation}")
        self.txn = None  # the number of the transaction under way, or of the last one
        self.producer = KafkaProducer(
            bootstrap_servers=spec.bootstrap,
            transactional_id=transactional_id(spec.input_topic, spec.copier),
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS, acks="all", linger_ms=5,
            request_timeout_ms=REQUEST_TIMEOUT_MS, delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
            max_block_ms=MAX_BLOCK_MS)
        self.consumer = KafkaConsumer(
            bootstrap_servers=spec.bootstrap, group_id=spec.group,
            isolation_level="read_committed", enable_auto_commit=False,
            auto_offset_reset="earliest", max_poll_records=TRANSACTION_RECORDS,
            session_timeout_ms=MEMBER_SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=MEMBER_SESSION_TIMEOUT_MS // 6)

    def run(self, stop):
        self._init(stop)
        if self.spec.subscribe:
            self.consumer.subscribe([self.spec.input_topic])
        else:
            self.consumer.assign([self.partition])
            self._rewind(stop)
        number = 0
        while not stop.is_set():
            try:
                polled = self.consumer.poll(timeout_ms=100)
            except KafkaError as exc:  # recorded; the position is unchanged
                self.history.write(op="poll-error", **self.ids, error=error_name(exc))
                stop.wait(RETRY_PAUSE)
                continue
            records = [(tp.partition, r) for tp, rs in polled.items() for r in rs]
            if records:
                self._transaction(number, records, stop)
                number += 1
        self._transaction(number, [], stop)  # the last: the position alone (module doc)

    def _partitions(self):
        """The input partitions this incarnation copies now."""
        return sorted(self.consumer.assignment()) if self.spec.subscribe else [self.partition]

    def _init(self, stop):
        """init_transactions, again after each timeout (the same request) until ``stop``."""
        self.history.write(op="init-invoke", **self.ids)
        while True:
            try:
                self.producer.init_transactions()
                break
            except KafkaTimeoutError:
                if stop.is_set():
                    raise
        self.history.write(op="init", **self.ids)

    def _rewind(self, stop):
        """Seek to the group's committed offsets (the start when there is none), asking
        again through coordinator failovers until ``stop``."""
        for partition in self._partitions():
            while True:
                try:
                    committed = self.consumer.committed(partition)
                    break
                except KafkaError as exc:
                    self.history.write(op="rewind-error", **self.ids, error=error_name(exc))
                    if stop.wait(RETRY_PAUSE):
                        raise
            if committed is None:
                self.consumer.seek_to_beginning(partition)
            else:
                self.consumer.seek(partition, committed)

    def _transaction(self, number, records, stop):
        """Copy ``records`` in transaction ``number`` (module doc, steps 2 and 3)."""
        self.txn = number
        txn = {**self.ids, "txn": number}
        self.history.write(op="begin", **txn)
        output = self.spec.output_topic
        try:
            self.producer.begin_transaction()
            for partition, record in records:
                self.producer.send(output, key=record.key, partition=partition,
                                   value=copy_value(record.value.decode(), self.spec.copier,
                                                    self.spec.incarnation, number).encode())
            positions = {tp: OffsetAndMetadata(self.consumer.position(tp), "")
                         for tp in self._partitions()}
            offset = positions[self.partition].offset if self.partition in positions else None
            if positions:  # none: a member the group has not assigned anything yet
                self.producer.send_offsets_to_transaction(positions,
                                                          self.consumer.group_metadata())
            if records and self.rng.random() < ABORT_SHARE:
                self.producer.abort_transaction(timeout_ms=END_TIMEOUT_MS)
                self.history.write(op="abort", **txn, records=len(records), reason="random")
                self._rewind(stop)
                return
            sent = {"records": len(records), "offset": offset, "offsets": len(positions)}
            self.history.write(op="commit-invoke", **txn, **sent)
            self.producer.commit_transaction(timeout_ms=END_TIMEOUT_MS)
            self.history.write(op="commit", **txn, **sent)
        except ProducerFencedError:
            raise
        except KafkaError as exc:
            self.history.write(op="txn-error", **txn, error=error_name(exc))
            self.producer.abort_transaction(timeout_ms=END_TIMEOUT_MS)
            self.history.write(op="abort", **txn, records=len(records),
                               reason=error_name(exc))
            self._rewind(stop)

    def close(self):
        self.producer.close(timeout=0)
        self.consumer.close(autocommit=False)
