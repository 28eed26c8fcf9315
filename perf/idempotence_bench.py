"""The idempotent producer against the plain one on workload 1's producer side, same run.

    .venv/bin/python -m perf.idempotence_bench [--repeat 5] [--records 300000]

Workload 1's producer: one KafkaProducer, ``send()`` one 100-byte value at a time, no
keys, one partition, one broker (a real one-broker cluster, RF 1), batch_size 16384,
linger_ms 5; the clock runs from the first send until flush() returns (every record
acknowledged). Three settings, run in turn within each repeat (alternating, so drift of
the machine hits them alike), each with a new producer:

* ``plain, acks=1``: workload 1's own settings (``enable_idempotence=False``);
* ``plain, acks=all``: the same with acks=all, what idempotence requires;
* ``idempotent``: ``enable_idempotence=True`` (acks=all): InitProducerId, then a producer
  id, epoch and sequence stamped on every batch and checked by the broker.

Prints the median records/s of each over the repeats, and the median CPU µs per record of
the producer's sender thread and of the broker process (where idempotence costs: the
stamping and sequence bookkeeping per batch in the one, the producer-state checks per
batch in the other), and the ratios of the idempotent producer's records/s to both plain
ones (issue 15's target: >= 0.95).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import psutil

from cluster.admin.kafka_admin_client import KafkaAdminClient, NewTopic
from cluster.producer.kafka_producer import KafkaProducer
from cluster.supervisor.cluster import Cluster

TOPIC = "bench"
VALUE = b"v" * 100
WORKLOAD_1 = dict(linger_ms=5, batch_size=16384)
SETTINGS = {
    "plain, acks=1": dict(WORKLOAD_1, acks=1, enable_idempotence=False),
    "plain, acks=all": dict(WORKLOAD_1, acks="all", enable_idempotence=False),
    "idempotent": dict(WORKLOAD_1, acks="all", enable_idempotence=True),
}


def run_send(bootstrap, records, settings, broker):
    """(send() records/s, sender CPU µs/record, broker CPU µs/record) of one producer with
    ``settings``; ``broker``: the broker's psutil.Process."""
    with KafkaProducer(bootstrap_servers=bootstrap, **settings) as producer:
        producer.send(TOPIC, VALUE).get(30)  # metadata, connection, producer id
        send = producer.send
        sender = time.pthread_getcpuclockid(producer._sender.ident)
        sender_start, broker_start = time.clock_gettime(sender), _cpu(broker)
        start = time.perf_counter()
        for _ in range(records):
            send(TOPIC, VALUE)
        producer.flush(120)
        elapsed = time.perf_counter() - start
        return (records / elapsed,
                (time.clock_gettime(sender) - sender_start) / records * 1e6,
                (_cpu(broker) - broker_start) / records * 1e6)


def _cpu(process):
    times = process.cpu_times()
    return times.user + times.system


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--records", type=int, default=300_000)
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="ringlog-idempotence-bench-")
    runs = {name: [] for name in SETTINGS}
    try:
        with Cluster(os.path.join(work, "data"), brokers=1, num_partitions=1) as cluster:
            with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
                admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])
            broker = psutil.Process(cluster.pids()[0])
            for repeat in range(args.repeat):
                for name, settings in SETTINGS.items():
                    run = run_send(cluster.bootstrap_servers, args.records, settings, broker)
                    runs[name].append(run)
                    print(f"repeat {repeat + 1}: {name:16s} {run[0]:12,.0f} records/s, "
                          f"sender {run[1]:.2f} µs/record, broker {run[2]:.2f} µs/record",
                          flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {name: [statistics.median(column) for column in zip(*found)]
               for name, found in runs.items()}
    print(f"\nmedian of {args.repeat} runs of {args.records:,} records (100-byte values):")
    for name, (rate, sender, broker_cpu) in medians.items():
        print(f"  {name:16s} {rate:12,.0f} records/s, sender {sender:.2f} µs/record, "
              f"broker {broker_cpu:.2f} µs/record")
    medians = {name: figures[0] for name, figures in medians.items()}
    idempotent = medians["idempotent"]
    for name in ("plain, acks=1", "plain, acks=all"):
        print(f"  idempotent / {name}: {idempotent / medians[name]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
