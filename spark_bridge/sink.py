"""The ``ringlog`` sink: ``df.write.format("ringlog")`` and
``df.writeStream.format("ringlog")``, Spark's Kafka sink columns and options
(``sink_rows``, ``sink_options``) with one difference: it is exactly once, built on
ringlog's transactions, as a two-phase commit.

- **Tasks** (``write``, in Spark's Python workers): each task writes its rows in one
  transaction of its own and prepares it (``KafkaProducer.prepare_transaction``: every
  record acknowledged, acks=all, idempotent), then closes its producer without ending the
  transaction, and returns ``SinkCommitMessage`` (transactional id, producer id, epoch).
  A failed task aborts its transaction.
- **The driver** (``commit``) ends them (``KafkaAdminClient.end_transaction``): a batch
  write commits every task's transaction, or aborts them all (``abort``). A streaming
  write first records its decision for the micro-batch in the query's checkpoint
  (``sink_commit_log``), then commits: a driver killed midway finishes the decision when
  the query restarts (``RinglogStreamWriter.__init__``, before any task runs), and the
  micro-batch Spark then replays is aborted rather than committed a second time.

A streaming task's transactional id is ``ringlog-sink-<query id>-<partition>`` (Spark's
query id survives restarts, it is in the checkpoint): a task of the next attempt or
micro-batch fences the producer of a task that died (its open transaction is aborted at
once, so read_committed readers do not wait for its timeout). A batch write's ids carry a
random id of the write. Read the output with ``kafka.isolation.level=read_committed``:
read_uncommitted readers also see the records of aborted attempts.

Assumptions, as Spark's other exactly-once sinks: a replayed micro-batch gives the same
rows (a deterministic query, Spark's contract for sources and sinks), and speculative
execution is off (two attempts of one task fence each other). A prepared micro-batch must
be committed within ``kafka.transaction.timeout.ms`` (15 minutes by default): a driver down
longer finds its transactions aborted by the coordinator, and the query fails naming them
rather than losing rows silently.
"""
from __future__ import annotations

import dataclasses
import logging
import uuid

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from spark_bridge.sink_commit_log import SinkCommitLog
from spark_bridge.sink_rows import records

log = logging.getLogger(__name__)

#: TaskContext local properties Spark sets for a streaming query's tasks.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclasses.dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What a task hands the driver: its prepared transaction (``producer_id`` None when
    it wrote nothing)."""

    transactional_id: str
    producer_id: int = None
    epoch: int = None
    records: int = 0

    def as_dict(self):
        return dataclasses.asdict(self)


def write_task(options, transactional_id, batches, eager=False):
    """Write the rows of ``batches`` (Arrow record batches) in one transaction and
    prepare it (module doc). ``eager``: open the transaction even for no rows (fences a
    dead attempt's producer with the same id)."""
    from cluster.producer.kafka_producer import KafkaProducer

    producer = None
    count = 0
    where = f" of the task writing as {transactional_id}"
    try:
        for batch in batches:
            if producer is None and (eager or batch.num_rows):
                producer = KafkaProducer(**options.producer_config(transactional_id))
                producer.init_transactions()
                producer.begin_transaction()
            send = producer.send if producer is not None else None
            for topic, value, key, headers, partition in records(batch, options.topic, where):
                send(topic, value=value, key=key, headers=headers, partition=partition)
            count += batch.num_rows
        if producer is None and eager:
            producer = KafkaProducer(**options.producer_config(transactional_id))
            producer.init_transactions()
        if not count:
            return SinkCommitMessage(transactional_id)
        producer_id, epoch = producer.prepare_transaction()
        return SinkCommitMessage(transactional_id, producer_id, epoch, count)
    except BaseException:
        if producer is not None:
            try:
                producer.abort_transaction()
            except Exception:  # the task's own error is the one to report
                log.exception("could not abort transaction %s", transactional_id)
            producer.close()
            producer = None
        raise
    finally:
        if producer is not None:
            producer.close(timeout=0)  # leaves the prepared transaction to the driver


def end_transactions(options, transactions, committed):
    """EndTxn for each prepared transaction (dicts or SinkCommitMessages)."""
    transactions = [t if isinstance(t, dict) else t.as_dict() for t in transactions
                    if t is not None]
    transactions = [t for t in transactions if t["producer_id"] is not None]
    if not transactions:
        return
    from cluster.admin.kafka_admin_client import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=options.bootstrap_servers)
    try:
        for t in transactions:
            admin.end_transaction(t["transactional_id"], t["producer_id"], t["epoch"],
                                  committed)
    finally:
        admin.close()


class RinglogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("ringlog").mode("append").save()``: every task's rows, or none."""

    def __init__(self, options):
        self.options = options
        self.write_id = uuid.uuid4().hex

    def write(self, iterator):
        from pyspark import TaskContext

        partition = TaskContext.get().partitionId()
        return write_task(self.options, f"ringlog-sink-{self.write_id}-{partition}",
                          iterator)

    def commit(self, messages):
        end_transactions(self.options, messages, committed=True)

    def abort(self, messages):
        end_transactions(self.options, messages, committed=False)


class RinglogStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("ringlog")``: exactly once per micro-batch (module doc).
    Made on the driver when the query starts: a decision a killed driver left unfinished
    is finished here, before any task of the restarted query runs."""

    def __init__(self, options):
        self.options = options
        self._finish_pending()

    def _finish_pending(self):
        commit_log = SinkCommitLog(self.options.checkpoint_location)
        pending = commit_log.pending()
        if pending is not None:
            batch_id, transactions = pending
            log.warning("micro-batch %d was decided but not fully committed before the "
                        "query stopped: committing its %d transactions now", batch_id,
                        len(transactions))
            end_transactions(self.options, transactions, committed=True)
            commit_log.mark_done(batch_id)

    def write(self, iterator):
        from pyspark import TaskContext

        context = TaskContext.get()
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        return write_task(self.options,
                          f"ringlog-sink-{query_id}-{context.partitionId()}", iterator,
                          eager=True)

    def commit(self, messages, batchId):
        commit_log = SinkCommitLog(self.options.checkpoint_location)
        prepared = [m.as_dict() for m in messages if m is not None and m.producer_id is not None]
        decided = commit_log.decided(batchId)
        if decided is None:
            commit_log.decide(batchId, prepared)
            end_transactions(self.options, prepared, committed=True)
            commit_log.mark_done(batchId)
            return
        # Spark replays a micro-batch the sink committed before a crash: its rows are in
        # the topic already; this run's copies are aborted.
        if not commit_log.done(batchId):
            end_transactions(self.options, decided, committed=True)
            commit_log.mark_done(batchId)
        log.warning("micro-batch %d was committed before the query restarted: aborting the "
                    "%d transactions of its replay", batchId, len(prepared))
        end_transactions(self.options, [t for t in prepared if t not in decided],
                         committed=False)

    def abort(self, messages, batchId):
        decided = SinkCommitLog(self.options.checkpoint_location).decided(batchId) or []
        end_transactions(self.options, [m for m in messages if m is not None
                                        and m.as_dict() not in decided], committed=False)
