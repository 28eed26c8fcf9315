"""CPU time per fetch of the consumer's own work when each Fetch brings one small batch —
a consumer keeping up with its producer (workload 4 at 10,000 records/s) — the figure a
shared machine does not distort.

    .venv/bin/python -m perf.fetch_cost [--fetches 2000] [--records-per-batch 5] [--repeat 3]

A one-broker cluster, one partition filled with ``--fetches`` batches of
``--records-per-batch`` records (100-byte values, no key; one ``send()``s-then-``flush()``
per batch), read back from offset 0 by one ``KafkaConsumer`` in this thread with
``poll_batches()`` or ``poll()`` and ``max_partition_fetch_bytes`` one batch long, so every
Fetch (the data being there already, no long-poll wait) carries one batch: what the
consumer pays per fetch to encode and write the Fetch request, read and decode the
response, parse the batch's records and hand them out. Prints the consuming thread's
CPU µs per Fetch response (``time.thread_time`` from the first poll to the last record,
divided by the responses read), the part of it spent waiting for the response
(``WakeSlot.wait_until``: the ring's spin before it blocks, which grows with the broker's
answer time and the machine's load) and the rest, the consumer's own work, medians of the
repeats and each run.

For an A/B, run the same file against two checkouts (``PYTHONPATH`` pointing at each),
alternating.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

TOPIC = "fetch-cost"
VALUE_BYTES = 100
#: Bytes of slack on top of one batch's size (timestamp deltas vary a varint byte or two).
SLACK = 16


def batch_size(records_per_batch):
    """Bytes of one batch of ``records_per_batch`` 100-byte values (no key)."""
    from segments.record.records import RecordBatchBuilder
    builder = RecordBatchBuilder(0, 1 << 20)
    now = int(time.time() * 1000)
    for _ in range(records_per_batch):
        builder.append(now, None, bytes(VALUE_BYTES), ())
    return len(builder.build())


def fill(bootstrap, fetches, records_per_batch):
    from cluster import KafkaProducer
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1) as producer:
        value = bytes(VALUE_BYTES)
        for _ in range(fetches):
            for _ in range(records_per_batch):
                producer.send(TOPIC, value, partition=0)
            producer.flush(60)


def consume(bootstrap, records, max_bytes, mode):
    """(CPU µs per Fetch response, of which waiting, responses, records per response)."""
    from cluster.structs import TopicPartition
    from consumer_proc.consumer import KafkaConsumer
    from consumer_proc.fetcher import Fetcher
    from shm_ring.wakeup import WakeSlot
    responses = [0]
    waiting = [0.0]
    handle = Fetcher._handle_response
    wait_until = WakeSlot.wait_until

    def counted(self, *args):
        responses[0] += 1
        return handle(self, *args)

    def timed_wait(self, *args):
        start = time.thread_time()
        try:
            return wait_until(self, *args)
        finally:
            waiting[0] += time.thread_time() - start
    Fetcher._handle_response = counted
    WakeSlot.wait_until = timed_wait
    tp = TopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, max_partition_fetch_bytes=max_bytes)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        consumer.position(tp)
        count = 0
        start = time.thread_time()
        first = responses[0]
        while count < records:
            if mode == "poll":
                for batch in consumer.poll(timeout_ms=1000).values():
                    count += len(batch)
            else:
                for runs in consumer.poll_batches(timeout_ms=1000).values():
                    count += sum(map(len, runs))
        used = time.thread_time() - start
        read = responses[0] - first
        return used / read * 1e6, waiting[0] / read * 1e6, read, count / read
    finally:
        consumer.close()
        Fetcher._handle_response = handle
        WakeSlot.wait_until = wait_until


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fetches", type=int, default=2000)
    parser.add_argument("--records-per-batch", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mode", choices=("poll_batches", "poll"), default="poll_batches")
    args = parser.parse_args(argv)
    from cluster import Cluster, KafkaAdminClient, NewTopic
    from segments.record import accel
    data_dir = tempfile.mkdtemp(prefix="fetch-cost-")
    cluster = Cluster(data_dir, brokers=1, auto_create_topics_enable=False)
    try:
        cluster.start()
        with KafkaAdminClient(bootstrap_servers=data_dir) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 1)])
        fill(data_dir, args.fetches, args.records_per_batch)
        max_bytes = batch_size(args.records_per_batch) + SLACK
        runs = []
        for _ in range(args.repeat):
            runs.append(consume(data_dir, args.fetches * args.records_per_batch, max_bytes,
                                args.mode))
    finally:
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    print(f"{accel.describe()}")
    own = [cpu - waiting for cpu, waiting, _, _ in runs]
    print(f"{args.mode}, {args.fetches} batches of {args.records_per_batch} records: CPU µs "
          f"per Fetch response, median {statistics.median(r[0] for r in runs):.1f}, of which "
          f"waiting for the response (the ring's spin) "
          f"{statistics.median(r[1] for r in runs):.1f}; own work (the rest) median "
          f"{statistics.median(own):.1f} (runs "
          + ", ".join(f"{cpu:.1f} - {waiting:.1f} over {read} responses, {per:.1f} records "
                      f"each" for cpu, waiting, read, per in runs) + ")")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
