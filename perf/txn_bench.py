"""A transactional copy job against the plain one (idempotent producer, consumer commits),
same run.

    .venv/bin/python -m perf.txn_bench [--repeat 3] [--records 100000] [--rf 3,1]

The cluster: 3 brokers; per replication factor in ``--rf`` an input and an output topic of
3 partitions (RF 3: ``min.insync.replicas`` 2; RF 1: 1); the input holds ``--records``
100-byte values, written once before the runs. ``__consumer_offsets`` and
``__transaction_state`` get 3 partitions instead of Kafka's 50 (their RF stays 3, min ISR
2): one partition of each serves the job, and 300 fewer replicas start faster on 2 cores.

The copy job runs in a process of its own (``copy_job``, started with ``spawn``): a
KafkaConsumer with a group id, assigned every input partition from the beginning
(``assign``: no rebalance to wait for; its commits are the group's), ``max_poll_records``
500, and a KafkaProducer (acks=all, idempotent, linger_ms 5, batch_size 16384) that sends
each record's value to the output topic. Three jobs, run in turn within each repeat
(alternating, so drift of the machine hits them alike), each with a new group:

* ``plain``: every 100 ms ``flush()``, then ``consumer.commit()`` (at least once);
* ``txn/100ms``: ``transactional_id`` and a read_committed consumer; every 100 ms
  ``send_offsets_to_transaction`` (the consumer's positions), ``commit_transaction()``,
  ``begin_transaction()`` — exactly once;
* ``txn/1000``: the same, committing every 1,000 records.

The clock runs from the first poll that returned records until the last commit returned;
the job then checks that the group's committed offsets cover every input record (a
transaction's, once its COMMIT marker reached ``__consumer_offsets``). Prints
each run, then per RF the median records/s over the repeats and the ratios of each
transactional job to the plain one.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time

PARTITIONS = 3
VALUE = b"v" * 100
COMMIT_INTERVAL = 0.1
COMMIT_RECORDS = 1000
#: job name -> (transactional, commit every N records or None: every COMMIT_INTERVAL s).
JOBS = {
    "plain": (False, None),
    "txn/100ms": (True, None),
    "txn/1000": (True, COMMIT_RECORDS),
}
PRODUCER = dict(acks="all", enable_idempotence=True, linger_ms=5, batch_size=16384)


def copy_job(bootstrap, job, source, target, group, records, conn):
    """Copy ``records`` records of ``source`` to ``target`` as ``job`` (module doc); send
    (records/s, commits) or an error text through ``conn``. The copy process's body."""
    try:
        conn.send(_copy(bootstrap, job, source, target, group, records))
    except Exception as exc:  # reported by the parent
        conn.send(f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def _copy(bootstrap, job, source, target, group, records):
    from cluster import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition

    transactional, every = JOBS[job]
    partitions = [TopicPartition(source, p) for p in range(PARTITIONS)]
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, max_poll_records=500,
                             isolation_level="read_committed" if transactional
                             else "read_uncommitted")
    producer = KafkaProducer(bootstrap_servers=bootstrap, **PRODUCER,
                             transactional_id=f"{group}-copier" if transactional else None)
    try:
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        producer.partitions_for(target)
        if transactional:
            producer.init_transactions()
            producer.begin_transaction()

        def commit():
            if transactional:
                producer.send_offsets_to_transaction(
                    {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in partitions},
                    consumer.group_metadata())
                producer.commit_transaction()
            else:
                producer.flush()
                consumer.commit()

        send = producer.send
        copied = since_commit = commits = 0
        started = last_commit = None
        while copied < records:
            polled = consumer.poll(timeout_ms=500)
            now = time.perf_counter()
            for batch in polled.values():
                for record in batch:
                    send(target, record.value)
                copied += len(batch)
                since_commit += len(batch)
            if started is None and copied:
                started = last_commit = now
            if started is None:
                continue
            due = since_commit >= every if every else now - last_commit >= COMMIT_INTERVAL
            if due or copied >= records:
                commit()
                commits += 1
                since_commit = 0
                last_commit = time.perf_counter()
                if transactional and copied < records:
                    producer.begin_transaction()
        elapsed = time.perf_counter() - started
        deadline = time.monotonic() + 30  # a transaction's offsets count once its marker
        while (committed := sum(consumer.committed(tp) or 0 for tp in partitions)) != records:
            if time.monotonic() > deadline:  # reached __consumer_offsets: soon after EndTxn
                raise AssertionError(f"the group committed {committed} offsets, "
                                     f"expected {records}")
            time.sleep(0.05)
        return copied / elapsed, commits
    finally:
        producer.close()
        consumer.close(autocommit=False)


def fill(bootstrap, topic, records):
    from cluster import KafkaProducer

    with KafkaProducer(bootstrap_servers=bootstrap, **PRODUCER) as producer:
        for _ in range(records):
            producer.send(topic, VALUE)
        producer.flush(300)


def run_job(ctx, bootstrap, job, source, target, group, records):
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(target=copy_job, name=f"copy {job}",
                          args=(bootstrap, job, source, target, group, records, child))
    process.start()
    child.close()
    try:
        if not parent.poll(600):
            raise RuntimeError(f"copy job {job} gave no answer in 600 s")
        answer = parent.recv()
    except BaseException:
        process.kill()  # Ctrl-C or no answer: the job is not waited for
        raise
    finally:
        process.join(60)
        if process.is_alive():
            process.kill()
            process.join()
    if isinstance(answer, str):
        raise RuntimeError(f"copy job {job} failed: {answer}")
    return answer


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rf", default="3,1",
                        help="replication factors to measure, comma-separated (3 and/or 1)")
    args = parser.parse_args(argv)
    factors = [int(rf) for rf in args.rf.split(",")]
    if any(rf not in (1, 3) for rf in factors):
        parser.error(f"--rf takes 3 and/or 1, found {args.rf!r}")

    from cluster.admin.kafka_admin_client import KafkaAdminClient, NewTopic
    from cluster.supervisor.cluster import Cluster

    ctx = multiprocessing.get_context("spawn")
    work = tempfile.mkdtemp(prefix="ringlog-txn-bench-")
    runs = {(rf, job): [] for rf in factors for job in JOBS}
    try:
        with Cluster(os.path.join(work, "data"), brokers=3, offsets_topic_num_partitions=3,
                     transaction_state_log_num_partitions=3) as cluster:
            bootstrap = cluster.bootstrap_servers
            with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
                admin.create_topics([
                    NewTopic(f"{kind}-rf{rf}", PARTITIONS, rf,
                             topic_configs={"min.insync.replicas": str(min(rf, 2))})
                    for rf in factors for kind in ("in", "out")])
            for rf in factors:
                started = time.perf_counter()
                fill(bootstrap, f"in-rf{rf}", args.records)
                print(f"input of RF {rf}: {args.records:,} records written in "
                      f"{time.perf_counter() - started:.1f} s", flush=True)
            for repeat in range(args.repeat):
                for rf in factors:
                    for job in JOBS:
                        group = f"copy-{rf}-{job.replace('/', '-')}-{repeat}"
                        rate, commits = run_job(ctx, bootstrap, job, f"in-rf{rf}",
                                                f"out-rf{rf}", group, args.records)
                        runs[rf, job].append(rate)
                        print(f"repeat {repeat + 1}: RF {rf} {job:10s} {rate:10,.0f} "
                              f"records/s, {commits} commits", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nmedian of {args.repeat} runs copying {args.records:,} records (100-byte values):")
    for rf in factors:
        medians = {job: statistics.median(runs[rf, job]) for job in JOBS}
        for job, rate in medians.items():
            ratio = "" if job == "plain" else f"  ({rate / medians['plain']:.3f} x plain)"
            print(f"  RF {rf} {job:10s} {rate:10,.0f} records/s{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
