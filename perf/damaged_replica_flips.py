"""One flipped byte in one replica per partition at RF 3, then a restart (issue 20 item 1).

Run by hand (not a test)::

    python -m perf.damaged_replica_flips --flips 100 --stop clean
    python -m perf.damaged_replica_flips --flips 100 --stop sigkill

It starts a 3-broker cluster in a temporary directory, creates a topic of ``--partitions``
partitions (RF 3, min.insync.replicas 2, small segments), produces ``--records`` keyed
records with acks=all, and then stops every broker (``clean``: SIGTERM, a clean
shutdown; ``sigkill``: SIGKILL of all of them). That data directory is the template.
Per round, on a fresh copy of it: one byte of one ``.log`` (a random segment, a random
position, XORed with a random non-zero value) of one random replica of every partition
is flipped, the cluster started, every partition read from the beginning by a consumer
(until it has served as many records as were acknowledged, or ``--read-timeout``), the
records compared with what was acknowledged (offset and value), and then the metadata
watched until every partition has its three replicas in the ISR again and none is
reported damaged (``--heal-timeout``). Rounds go on until ``--flips`` bytes were
flipped. One JSON line: flips, rounds, acknowledged records checked, lost (missing or
changed), partitions that lost any, partitions not healed within the timeout, and the
seconds the runs took.

Run it with ``PYTHONPATH`` at another checkout to measure that code the same way.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import tempfile
import time

from cluster import Cluster, KafkaAdminClient, KafkaConsumer, KafkaProducer, NewTopic
from cluster.structs import TopicPartition

TOPIC = "flips"
CONFIG = dict(log_segment_bytes=16 * 1024, replica_lag_time_max_ms=2000)


def build_template(path, partitions, records, stop):
    """The template data directory; return {partition: {offset: value}} acknowledged."""
    cluster = Cluster(path, brokers=3, **CONFIG)
    cluster.start()
    try:
        with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
            admin.create_topics([NewTopic(TOPIC, num_partitions=partitions,
                                          replication_factor=3,
                                          topic_configs={"min.insync.replicas": "2"})])
        cluster.wait_for_metadata(lambda i: TOPIC in i.topics and all(
            len(s.isr) == 3 for s in i.topics[TOPIC].partitions), timeout=60)
        acked = {p: {} for p in range(partitions)}
        with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all",
                           linger_ms=2, batch_size=2048) as producer:
            futures = [(b"v-%d" % n, producer.send(TOPIC, b"v-%d" % n, key=b"k-%d" % n))
                       for n in range(records)]
            producer.flush(60)
            for value, future in futures:
                metadata = future.get(60)
                acked[metadata.partition][metadata.offset] = value
        cluster.wait_for_metadata(lambda i: all(
            len(s.isr) == 3 for s in i.topics[TOPIC].partitions), timeout=60)
    finally:
        if stop == "sigkill":
            for pid in cluster.pids().values():
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        cluster.stop()  # after a SIGKILL: only removes what the brokers left behind
    return acked


def flip_one_replica_per_partition(data_dir, partitions, rng):
    for partition in range(partitions):
        broker = rng.randrange(3)
        directory = os.path.join(data_dir, f"broker-{broker}", f"{TOPIC}-{partition}")
        files = sorted(os.path.join(directory, n) for n in os.listdir(directory)
                       if n.endswith(".log") and os.path.getsize(os.path.join(directory, n)))
        path = rng.choice(files)
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            data[rng.randrange(len(data))] ^= rng.randrange(1, 256)
            f.seek(0)
            f.write(data)


def read_back(cluster, acked, timeout):
    """{partition: {offset: value}} served, reading until every partition has served as
    many records as were acknowledged, or ``timeout`` seconds."""
    served = {p: {} for p in acked}
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                       auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, p) for p in acked])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(
                len(served[p]) < len(rows) for p, rows in acked.items()):
            try:
                batches = consumer.poll(timeout_ms=200)
            except Exception:  # an offline replica's storage error: keep polling
                time.sleep(0.2)
                continue
            for tp, records in batches.items():
                for record in records:
                    served[tp.partition][record.offset] = bytes(record.value)
    return served


def run_round(template, copy, acked, rng, read_timeout, heal_timeout):
    """One round on a copy of ``template`` at ``copy`` (removed after): ``({partition:
    acknowledged records not served as acknowledged}, partitions not healed)``."""
    partitions = len(acked)
    shutil.copytree(template, copy)
    flip_one_replica_per_partition(copy, partitions, rng)
    cluster = Cluster(copy, brokers=3, **CONFIG)
    try:
        cluster.start()
        served = read_back(cluster, acked, read_timeout)
        deadline = time.monotonic() + heal_timeout
        while time.monotonic() < deadline and len(
                healed(cluster.metadata(), partitions)) < partitions:
            time.sleep(0.1)
        ok = healed(cluster.metadata(), partitions)
    finally:
        cluster.stop()
    shutil.rmtree(copy)
    lost = {p: sum(1 for o, v in rows.items() if served[p].get(o) != v)
            for p, rows in acked.items()}
    return lost, partitions - len(ok)


def healed(image, partitions):
    states = image.topics[TOPIC].partitions
    return [s.partition for s in states
            if len(s.isr) == 3 and not getattr(s, "damaged", ()) and s.leader >= 0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flips", type=int, default=100)
    parser.add_argument("--stop", choices=("clean", "sigkill"), default="clean")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--records", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--read-timeout", type=float, default=30.0)
    parser.add_argument("--heal-timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    rng = random.Random(f"{args.seed}-{args.stop}")
    started = time.monotonic()
    totals = {"stop": args.stop, "flips": 0, "rounds": 0, "acknowledged": 0, "lost": 0,
              "partitions_losing": 0, "not_healed": 0}
    with tempfile.TemporaryDirectory(prefix="damaged-replica-flips-") as tmp:
        template = os.path.join(tmp, "template")
        acked = build_template(template, args.partitions, args.records, args.stop)
        while totals["flips"] < args.flips:
            copy = os.path.join(tmp, f"round-{totals['rounds']}")
            lost, not_healed = run_round(template, copy, acked, rng, args.read_timeout,
                                         args.heal_timeout)
            totals["acknowledged"] += sum(len(rows) for rows in acked.values())
            totals["lost"] += sum(lost.values())
            totals["partitions_losing"] += sum(1 for n in lost.values() if n)
            totals["not_healed"] += not_healed
            totals["flips"] += len(acked)
            totals["rounds"] += 1
            print(json.dumps(totals), flush=True)
    totals["seconds"] = round(time.monotonic() - started)
    print(json.dumps(totals))
    return 1 if totals["lost"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
