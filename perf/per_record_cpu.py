"""CPU time per record of the per-record client paths, the figure a shared machine does not
distort: ``KafkaProducer.send()`` (the calling thread and the sender thread) and
``KafkaConsumer.poll()`` (the consumer's thread).

    .venv/bin/python -m perf.per_record_cpu [--records 200000] [--repeat 3]

Producer: ``perf.producer_bench``'s ``send()`` run into its sink broker (100-byte values, no
key, acks=1, one partition, linger_ms 5, batch_size 16384): CPU µs per record of the caller
and of the sender thread. Consumer: a one-broker cluster, one partition filled by the bulk
send in 16 KB batches, read back with ``poll()`` (``max_poll_records`` 500) two ways —
``count`` takes ``len()`` of each partition's records (what ``perf/suite``'s ringlog peer
does), ``read`` iterates every record and touches its value (what an application does) —
CPU µs per record of the consuming thread from the first poll to the last record.
Prints the median of the repeats and each run.

For an A/B, run the same file against two checkouts (``PYTHONPATH`` pointing at each),
alternating.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

from perf.producer_bench import SinkCluster, run_send

TOPIC = "per-record-cpu"
VALUE_BYTES = 100


def consume_cpu(bootstrap, records, mode):
    """CPU µs per record of reading ``records`` records from offset 0 (``mode``: count /
    read)."""
    from cluster.structs import TopicPartition
    from consumer_proc.consumer import KafkaConsumer
    tp = TopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        consumer.position(tp)
        count = 0
        size = 0
        start = time.thread_time()
        while count < records:
            for batch in consumer.poll(timeout_ms=1000).values():
                if mode == "read":
                    for record in batch:
                        size += len(record.value)
                        count += 1
                else:
                    count += len(batch)
        return (time.thread_time() - start) / count * 1e6
    finally:
        consumer.close()


def main(argv=None):
    import numpy as np

    from cluster.producer.kafka_producer import KafkaProducer
    from cluster.supervisor.cluster import Cluster
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--part", choices=("producer", "consumer", "both"), default="both")
    args = parser.parse_args(argv)
    figures = {}
    if args.part in ("producer", "both"):
        sink = SinkCluster()
        try:
            cpu = []
            for _ in range(args.repeat):
                run_send(sink.bootstrap_servers, args.records, cpu)
            figures["send() caller"] = [c for c, _ in cpu]
            figures["send() sender thread"] = [s for _, s in cpu]
        finally:
            sink.close()
    if args.part in ("consumer", "both"):
        data_dir = tempfile.mkdtemp(prefix="ringlog-cpu-")
        try:
            with Cluster(data_dir, brokers=1, num_partitions=1) as cluster:
                with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1,
                                   linger_ms=0) as producer:
                    values = np.full((args.records, VALUE_BYTES), ord("v"), dtype=np.uint8)
                    for future in producer.send_batch(TOPIC, values, partition=0,
                                                      batch_size=16384):
                        future.get(60)
                for mode in ("count", "read"):
                    figures[f"poll() {mode}"] = [
                        consume_cpu(cluster.bootstrap_servers, args.records, mode)
                        for _ in range(args.repeat)]
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
    print(f"CPU µs per record, median of {args.repeat} ({args.records} records a run)")
    for name, runs in figures.items():
        spread = ", ".join(f"{r:.3f}" for r in runs)
        print(f"  {name:24s} {statistics.median(runs):7.3f}   [{spread}]")


if __name__ == "__main__":
    main()
