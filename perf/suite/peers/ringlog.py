"""ringlog through its public API: a ``Cluster`` in a temporary directory, one topic whose
partitions are the channels (replication factor 1, or ``options["replication"]`` with
min.insync.replicas one less: workloads 8 and 9), ``KafkaProducer`` and ``KafkaConsumer``
in their own processes. The producer's acks are the task's (1, or all in workloads 8-9).

* record by record: ``send()`` per record (acks=1, linger_ms=5, batch_size 16 KB, no
  idempotence: ``perf.producer_bench``'s settings), ``poll()`` — a ConsumerRecord per record;
* bulk: ``send_batch`` of ``BULK_CALL`` records per call, ``poll_batches`` (columns, no
  per-record object);
* latency: ``send()`` with linger_ms=0, ``poll_batches`` and each value's stamp.

A producer given every partition lets the default partitioner spread its records (sticky
batches, as Kafka); given one, it sends there. Consumers ``assign`` their partitions and
read from the beginning (no group) — or, in a grouped task (workload 10), subscribe with a
``group_id``, wait (before the start) until the group gave them as many partitions as the
task names, and commit their positions when partitions are revoked. The brokers are the
servers whose RSS is reported.
"""
from __future__ import annotations

import glob
import os
import shutil
import tempfile

from perf.suite import latency, payloads

NAME = "ringlog"
DESCRIPTION = ("shared-memory rings to broker processes, segment files on disk; acks=1; "
               "send()/poll(), bulk send_batch()/poll_batches()")
TOPIC = "bench"
PRODUCER = dict(acks=1, linger_ms=5, batch_size=16384, enable_idempotence=False)
LATENCY_PRODUCER = dict(acks=1, linger_ms=0, enable_idempotence=False)
#: Records per send_batch call (what producer-perf-test --bulk uses).
BULK_CALL = 100_000
POLL_MS = 100
GROUP = "bench"


def missing(options):
    return None


class Deployment:
    """A started cluster of ``brokers`` brokers with topic TOPIC of ``channels``
    partitions, in a fresh directory under ``workdir``. Owned by the suite's main thread."""

    def __init__(self, workdir, channels, brokers, replication=1):
        from cluster import Cluster, KafkaAdminClient, NewTopic
        self.data_dir = tempfile.mkdtemp(prefix="ringlog-", dir=workdir)
        self.leftovers = []
        self.cluster = Cluster(self.data_dir, brokers=brokers, auto_create_topics_enable=False)
        try:
            self.cluster.start()
            with KafkaAdminClient(bootstrap_servers=self.data_dir) as admin:
                configs = ({"min.insync.replicas": str(replication - 1)} if replication > 1
                           else {})
                admin.create_topics([NewTopic(TOPIC, channels, replication,
                                              topic_configs=configs)])
        except BaseException:
            self.stop()
            raise
        self.endpoint = {"bootstrap": self.data_dir, "topic": TOPIC, "partitions": channels}

    def server_pids(self):
        return list(self.cluster.pids().values())

    def _objects(self):
        cluster_id = self.cluster.cluster_id
        if not cluster_id:
            return []
        return sorted(glob.glob(f"/dev/shm/ringlog.{cluster_id}*") +
                      glob.glob(f"/dev/shm/sem.ringlog.{cluster_id}*"))

    def stop(self):
        """Stop the brokers (the cluster removes its shared memory), note what of this
        cluster is still in /dev/shm (``leftovers``: what ringlog failed to clean), unlink
        it, remove the directory. Safe twice."""
        self.cluster.stop()
        for path in self._objects():
            self.leftovers.append(path)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        shutil.rmtree(self.data_dir, ignore_errors=True)


def deploy(workdir, channels, brokers, options):
    return Deployment(workdir, channels, brokers, options.get("replication", 1))


# -- client processes ---------------------------------------------------------------------------

def produce(endpoint, task, gate):
    from cluster import KafkaProducer
    topic = endpoint["topic"]
    every = len(task.channels) == endpoint["partitions"]
    if not every and len(task.channels) != 1:
        raise ValueError(f"a ringlog producer writes to one partition or to all "
                         f"{endpoint['partitions']}, found {task.channels}")
    partition = None if every else task.channels[0]
    props = dict(LATENCY_PRODUCER if task.latency else PRODUCER,
                 acks="all" if task.acks == "all" else 1)
    with KafkaProducer(bootstrap_servers=endpoint["bootstrap"], **props) as producer:
        producer.partitions_for(topic)
        send = producer.send
        if task.latency:
            first = latency.send_paced(lambda value: send(topic, value, partition=partition),
                                       task, gate)
        elif task.bulk:
            values = payloads.rows(task.size, min(task.records, BULK_CALL))
            gate.ready()
            first = latency.clock_ns()
            for count in payloads.units(task.records, len(values)):
                producer.send_batch(topic, values[:count], partition=partition)
        else:
            pool = payloads.pool(task.size)
            n = len(pool)
            gate.ready()
            first = latency.clock_ns()
            for i in range(task.records):
                send(topic, pool[i % n], partition=partition)
        producer.flush()
        last = latency.clock_ns()
    return {"records": task.records, "first_ns": first, "last_ns": last}


def _join(consumer, topic, task):
    """Subscribe as a member of GROUP and poll until the group gave this member as many
    partitions as ``task`` names (every member has joined); nothing is produced yet."""
    import time

    from cluster import ConsumerRebalanceListener

    class CommitOnRevoke(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            if revoked:
                consumer.commit({tp: consumer.position(tp) for tp in revoked})

        def on_partitions_assigned(self, assigned):
            pass

    consumer.subscribe([topic], listener=CommitOnRevoke())
    deadline = time.monotonic() + task.timeout
    while len(consumer.assignment()) != len(task.channels):
        if time.monotonic() > deadline:
            raise TimeoutError(f"consumer {task.index}: the group gave it "
                               f"{sorted(consumer.assignment())} after {task.timeout} s")
        if consumer.poll(timeout_ms=POLL_MS):
            raise RuntimeError("records before the producers started")


def consume(endpoint, task, gate):
    from cluster import KafkaConsumer, TopicPartition
    topic = endpoint["topic"]
    consumer = KafkaConsumer(bootstrap_servers=endpoint["bootstrap"],
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             group_id=GROUP if task.group else None)
    try:
        if task.group:
            _join(consumer, topic, task)
        else:
            tps = [TopicPartition(topic, p) for p in task.channels]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            for tp in tps:
                consumer.position(tp)
        recorder = latency.Recorder(task.records) if task.latency else None
        columns = task.bulk or task.latency
        count = 0
        first = last = None
        gate.ready()
        while not gate.expired():
            if columns:
                polled = consumer.poll_batches(timeout_ms=POLL_MS)
            else:
                polled = consumer.poll(timeout_ms=POLL_MS)
            if not polled:
                if gate.received(count):
                    break
                continue
            now = latency.clock_ns()
            first = now if first is None else first
            last = now
            for runs in polled.values():
                if columns:
                    for run in runs:
                        count += len(run)
                        if recorder is not None:
                            recorder.record(run.values(), now)
                else:
                    count += len(runs)
            if gate.received(count):
                break
    finally:
        consumer.close()
    return latency.receiver_figures(count, first, last, recorder)
