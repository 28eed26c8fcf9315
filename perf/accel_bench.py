"""CPU ns per record of the per-record paths that have a compiled twin (issue 24,
``segments/record/accel.py``), in one process, for A/B runs of the compiled and the
pure-Python paths (``RINGLOG_NO_ACCEL=1``) or of two checkouts (``PYTHONPATH``).

    .venv/bin/python -m perf.accel_bench [--part send|append|records|all] [--chunks 200]

* ``send``: ``KafkaProducer.send()`` of 100-byte values, no key (``perf.producer_bench``'s
  producer into its sink broker): the calling thread's CPU time per chunk of 1,000 sends
  (``time.thread_time``), median over the chunks — a chunk short enough that most run
  without the machine's other work in them, so the median is what one ``send()`` costs;
* ``append``: ``RecordBatchBuilder.append_value`` alone (100-byte values, a 16 KB batch
  filled, then a new builder), per append, median of ``--chunks`` batches;
* ``records``: ``RecordColumns.to_records`` of a 500-record run (100-byte values, 16 KB
  batches as the bulk send makes them, parsed by ``columns_parser``), per record, median of
  ``--chunks`` runs.

Prints which path ran (``accel.describe()``) and the medians. For an A/B alternate runs:
``RINGLOG_NO_ACCEL=1`` against unset, or ``PYTHONPATH`` at two checkouts.
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time

VALUE = b"v" * 100
SEND_CHUNK = 1000


def send_ns(chunks):
    from cluster.producer.kafka_producer import KafkaProducer
    from perf.producer_bench import PRODUCER, TOPIC, SinkCluster
    sink = SinkCluster()
    try:
        with KafkaProducer(bootstrap_servers=sink.bootstrap_servers, **PRODUCER) as producer:
            send = producer.send
            send(TOPIC, VALUE).get(30)
            clock = time.thread_time_ns
            samples = []
            for _ in range(chunks):
                start = clock()
                for _ in range(SEND_CHUNK):
                    send(TOPIC, VALUE)
                samples.append((clock() - start) / SEND_CHUNK)
            producer.flush(60)
    finally:
        sink.close()
    return samples


def append_ns(chunks):
    from segments.record.records import RecordBatchBuilder
    lock = threading.Lock()
    clock = time.thread_time_ns
    samples = []
    for _ in range(chunks):
        builder = RecordBatchBuilder(0, 16384, buffer=bytearray(16384))
        builder.append(1_000, None, VALUE)
        append = builder.append_value
        count = 0
        start = clock()
        while append(1_000, VALUE, lock) is not None:
            count += 1
        samples.append((clock() - start) / count)
    return samples


def records_ns(chunks):
    import numpy as np

    from consumer_proc.columns_parser import parse_batches
    from segments.record.batch_header import iter_batches
    from segments.record.bulk import build_batches
    values = np.full((3_000, len(VALUE)), ord("v"), dtype=np.uint8)
    data = b"".join(bytes(batch) for batch in build_batches(values, None, 1_000,
                                                              batch_size=16384))
    runs = parse_batches(data, list(iter_batches(data)))
    columns = runs[0].slice(0, 500)
    clock = time.thread_time_ns
    samples = []
    for _ in range(chunks):
        start = clock()
        records = columns.to_records("topic", 0)
        samples.append((clock() - start) / len(records))
    return samples


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("send", "append", "records", "all"), default="all")
    parser.add_argument("--chunks", type=int, default=200)
    args = parser.parse_args(argv)
    parts = ("append", "records", "send") if args.part == "all" else (args.part,)
    figures = {}
    for part in parts:
        figures[part] = {"send": send_ns, "append": append_ns, "records": records_ns}[part](
            args.chunks)
    try:
        from segments.record import accel
        print(f"record paths: {accel.describe()}")
    except ImportError:  # a checkout from before the compiled paths (an A/B against it)
        print("record paths: pure Python (no segments.record.accel in this checkout)")
    for part, samples in figures.items():
        print(f"  {part:8s} {statistics.median(samples):8.1f} ns per record (median of "
              f"{len(samples)}; quartiles {statistics.quantiles(samples, n=4)[0]:.1f}"
              f"-{statistics.quantiles(samples, n=4)[2]:.1f})")


if __name__ == "__main__":
    main()
