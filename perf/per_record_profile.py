"""Where the per-record paths spend their time: Python calls per record and a profile of
``KafkaProducer.send()`` (the calling thread and the sender thread) and of
``KafkaConsumer.poll()``.

    .venv/bin/python -m perf.per_record_profile [--records 100000] [--top 25]
                                                [--part producer|consumer|both]

Producer: the standard workload of ``perf.producer_bench`` (100-byte values, no key, acks=1,
one partition, linger_ms 5, batch_size 16384) into its sink broker (acknowledges, stores
nothing). Consumer: a one-broker cluster whose partition the bulk send filled in 16 KB
batches, read back with ``poll()`` (kafka-python's API, ``max_poll_records`` 500), every
record's value read.

Two passes each, so the counting does not distort the profile:

1. *calls*: a profile hook in every thread of the client counts Python and C calls by
   function while the records go through; printed per record, per thread;
2. *profile*: cProfile in the calling thread and, for the producer, in the sender thread
   (its ``run_once`` wrapped); the top functions by own time, in ns per record.

A profiler slows what it measures (each call costs more under it): the shares and the call
counts are the figures to read; CPU time per record comes from ``perf.producer_bench`` and
``perf.consumer_bench``.
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import shutil
import sys
import tempfile
import threading

from perf.producer_bench import PRODUCER, TOPIC, VALUE, SinkCluster

CONSUMER_TOPIC = "profile"


class CallCounter:
    """Counts calls per (thread name, function) while ``on``."""

    def __init__(self):
        self.counts = collections.Counter()
        self.on = False

    def hook(self, frame, event, arg):
        if not self.on:
            return
        if event == "call":
            code = frame.f_code
            name = f"{code.co_filename.rsplit('/', 2)[-2:][-1]}:{code.co_name}"
        elif event == "c_call":
            name = f"C {getattr(arg, '__qualname__', arg)}"
        else:
            return
        self.counts[(threading.current_thread().name, name)] += 1

    def report(self, records, title):
        print(f"\n== {title}: calls per record ==")
        per_thread = collections.defaultdict(list)
        for (thread, name), count in self.counts.items():
            per_thread[thread].append((count, name))
        for thread, items in sorted(per_thread.items()):
            python = sum(c for c, n in items if not n.startswith("C "))
            native = sum(c for c, n in items if n.startswith("C "))
            print(f"-- thread {thread}: {python / records:.2f} Python calls + "
                  f"{native / records:.2f} C calls per record")
            for count, name in sorted(items, reverse=True)[:20]:
                if count / records >= 0.005:
                    print(f"   {count / records:8.3f}  {name}")


def _print_profile(profile, records, title, top):
    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, name), (_, ncalls, tottime, cumtime, _) in stats.stats.items():
        rows.append((tottime, cumtime, ncalls, f"{filename.rsplit('/', 1)[-1]}:{line}:{name}"))
    total = sum(r[0] for r in rows)
    print(f"\n== {title}: profile, ns per record (under cProfile), total "
          f"{total / records * 1e9:.0f} ns ==")
    print(f"   {'own':>7} {'cum':>7} {'calls/rec':>9}  function")
    for tottime, cumtime, ncalls, name in sorted(rows, reverse=True)[:top]:
        print(f"   {tottime / records * 1e9:7.0f} {cumtime / records * 1e9:7.0f} "
              f"{ncalls / records:9.3f}  {name}")


# -- producer -----------------------------------------------------------------------------------

def producer_calls(bootstrap, records):
    from cluster.producer.kafka_producer import KafkaProducer
    counter = CallCounter()
    threading.setprofile(counter.hook)  # the sender thread, started by the producer
    try:
        with KafkaProducer(bootstrap_servers=bootstrap, **PRODUCER) as producer:
            producer.send(TOPIC, VALUE).get(30)
            sys.setprofile(counter.hook)
            counter.on = True
            send = producer.send
            for _ in range(records):
                send(TOPIC, VALUE)
            producer.flush(120)
            counter.on = False
            sys.setprofile(None)
    finally:
        threading.setprofile(None)
    counter.report(records, "producer send()")


def producer_profile(bootstrap, records, top):
    from cluster.producer import sender as sender_module
    from cluster.producer.kafka_producer import KafkaProducer
    sender_profile = cProfile.Profile()
    original = sender_module.Sender.run_once
    active = [False]

    def run_once(self):
        if not active[0]:
            return original(self)
        sender_profile.enable()
        try:
            return original(self)
        finally:
            sender_profile.disable()

    sender_module.Sender.run_once = run_once
    try:
        with KafkaProducer(bootstrap_servers=bootstrap, **PRODUCER) as producer:
            producer.send(TOPIC, VALUE).get(30)
            caller = cProfile.Profile()
            active[0] = True
            send = producer.send
            caller.enable()
            for _ in range(records):
                send(TOPIC, VALUE)
            caller.disable()
            producer.flush(120)
            active[0] = False
    finally:
        sender_module.Sender.run_once = original
    _print_profile(caller, records, "producer send(), calling thread", top)
    _print_profile(sender_profile, records, "producer, sender thread (run_once)", top)


# -- consumer -----------------------------------------------------------------------------------

def _consume(bootstrap, records, counter=None, profile=None):
    from cluster.structs import TopicPartition
    from consumer_proc.consumer import KafkaConsumer
    tp = TopicPartition(CONSUMER_TOPIC, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        consumer.position(tp)
        count = 0
        if counter is not None:
            sys.setprofile(counter.hook)
            counter.on = True
        if profile is not None:
            profile.enable()
        while count < records:
            for batch in consumer.poll(timeout_ms=1000).values():
                for record in batch:  # every record made and read, as an application does
                    record.value  # noqa: B018
                count += len(batch)
        if profile is not None:
            profile.disable()
        if counter is not None:
            counter.on = False
            sys.setprofile(None)
    finally:
        consumer.close()
    return count


def consumer_part(records, top):
    import numpy as np

    from cluster.producer.kafka_producer import KafkaProducer
    from cluster.supervisor.cluster import Cluster
    data_dir = tempfile.mkdtemp(prefix="ringlog-profile-")
    try:
        with Cluster(data_dir, brokers=1, num_partitions=1) as cluster:
            with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1,
                               linger_ms=0) as producer:
                values = np.full((records, len(VALUE)), ord("v"), dtype=np.uint8)
                for future in producer.send_batch(CONSUMER_TOPIC, values, partition=0,
                                                  batch_size=16384):
                    future.get(60)
            counter = CallCounter()
            count = _consume(cluster.bootstrap_servers, records, counter=counter)
            counter.report(count, "consumer poll()")
            profile = cProfile.Profile()
            count = _consume(cluster.bootstrap_servers, records, profile=profile)
            _print_profile(profile, count, "consumer poll()", top)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--part", choices=("producer", "consumer", "both"), default="both")
    args = parser.parse_args(argv)
    if args.part in ("producer", "both"):
        sink = SinkCluster()
        try:
            producer_calls(sink.bootstrap_servers, args.records)
            producer_profile(sink.bootstrap_servers, args.records, args.top)
        finally:
            sink.close()
    if args.part in ("consumer", "both"):
        consumer_part(args.records, args.top)


if __name__ == "__main__":
    main()
