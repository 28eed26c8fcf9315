"""Single-byte flips in one copy of the metadata log of a stopped cluster: how many starts.

    .venv/bin/python -m perf.metadata_flips [--flips 60] [--brokers 3] [--seed 20]

A cluster of ``--brokers`` brokers is started once in a fresh directory under /tmp, given
a few topics (several metadata batches) and some records, and stopped: the template. Each
flip then copies the template, flips one byte (a random nonzero xor) in one copy of the
metadata log — the controller's ``D/__cluster_metadata-0`` or one broker's
``D/broker-<id>/__cluster_metadata-0.copy``, in turn — in one position class, in turn:

- ``header``: a byte of a batch's header outside the CRC (baseOffset, batchLength,
  partitionLeaderEpoch, magic: bytes 0-16),
- ``checksum``: a byte of its CRC (bytes 17-20),
- ``body``: a byte under the CRC (attributes to the end of the records),

of a random batch, starts the cluster (``Cluster.start``), and checks that the metadata
page holds every topic with its partitions, that the copy flipped now holds the template's
bytes (repaired), that its damaged bytes were kept aside (``<copy>.<uuid>-damaged``) and
that a broker's log names it. Printed: one line per flip, then the counts per position
class (started / repaired / refused). Hand-run (about 5 s a flip); the directories are
deleted at the end.
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import random
import shutil
import tempfile

from cluster import Cluster, KafkaAdminClient, KafkaProducer, NewTopic
from cluster.metadata import data_dir as dd
from replica_proc.controller.metadata_copies import COPY_DIR, DAMAGED_SUFFIX

CLASSES = ("header", "checksum", "body")
TOPICS = {"orders": 6, "audit": 3, "events": 4}


def _batches(data):
    """(start, size) of each RecordBatch in ``data``."""
    out, position = [], 0
    while position + 12 <= len(data):
        size = 12 + int.from_bytes(data[position + 8:position + 12], "big")
        out.append((position, size))
        position += size
    return out


def _segments(directory):
    return sorted(glob.glob(os.path.join(directory, "*.log")))


def _template(root, brokers):
    data_dir = os.path.join(root, "template")
    cluster = Cluster(data_dir, brokers=brokers, auto_create_topics_enable=False)
    try:
        cluster.start()
        with KafkaAdminClient(bootstrap_servers=data_dir) as admin:
            for name, partitions in TOPICS.items():  # one metadata batch each
                admin.create_topics([NewTopic(name, partitions, min(3, brokers))])
        cluster.wait_for_metadata(lambda image: all(name in image.topics for name in TOPICS))
        with KafkaProducer(bootstrap_servers=data_dir, acks="all") as producer:
            for n in range(300):
                producer.send("orders", b"order %d" % n)
            producer.flush(60)
    finally:
        cluster.stop()
    return data_dir


def _flip(rng, path, kind):
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        start, size = rng.choice(_batches(data))
        low, high = {"header": (0, 17), "checksum": (17, 21), "body": (21, size)}[kind]
        position = start + rng.randrange(low, high)
        data[position] ^= rng.randrange(1, 256)
        f.seek(0)
        f.write(data)
    return position


def _one(root, template, brokers, number, kind, copy, rng):
    data_dir = os.path.join(root, f"flip-{number}")
    shutil.copytree(template, data_dir)
    target = (os.path.join(data_dir, dd.METADATA_LOG_DIR) if copy is None
              else os.path.join(data_dir, f"broker-{copy}", COPY_DIR))
    segment = rng.choice(_segments(target))
    with open(segment, "rb") as f:
        intact = f.read()
    position = _flip(rng, segment, kind)
    cluster = Cluster(data_dir, brokers=brokers, auto_create_topics_enable=False)
    try:
        try:
            cluster.start()
        except Exception as exc:  # the start refused: say why
            return "refused", f"{type(exc).__name__}: {str(exc).splitlines()[-1][:300]}"
        image = cluster.metadata()
        topics = {name: len(info.partitions) for name, info in image.topics.items()}
        if topics != TOPICS:
            return "wrong metadata", f"topics {topics}"
        with open(os.path.join(target, os.path.basename(segment)), "rb") as f:
            repaired = f.read()[:len(intact)] == intact
        aside = glob.glob(f"{target}.*{DAMAGED_SUFFIX}")
        named = False
        for path in glob.glob(os.path.join(data_dir, "broker-*", "broker.log")):
            with open(path, errors="replace") as f:
                named |= any(target in line and "ERROR" in line for line in f)
        if repaired and aside and named:
            return "repaired", f"kept aside as {os.path.basename(aside[0])}"
        return "started, not repaired", f"repaired={repaired} aside={aside} named={named}"
    finally:
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
        print(f"flip {number}: {kind} byte {position} of "
              f"{os.path.relpath(segment, data_dir)}", end=": ", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flips", type=int, default=60)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=20)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="ringlog-metadata-flips-", dir="/tmp")
    counts = collections.defaultdict(collections.Counter)
    try:
        template = _template(root, args.brokers)
        copies = [None, *range(args.brokers)]
        for number in range(args.flips):
            kind = CLASSES[number % len(CLASSES)]
            copy = copies[(number // len(CLASSES)) % len(copies)]
            outcome, detail = _one(root, template, args.brokers, number, kind, copy, rng)
            print(f"{outcome} ({detail})", flush=True)
            counts[kind][outcome] += 1
            counts["all"][outcome] += 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for kind in (*CLASSES, "all"):
        started = sum(n for outcome, n in counts[kind].items() if outcome != "refused")
        print(f"{kind}: {sum(counts[kind].values())} flips, {started} started; "
              + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts[kind].items())))


if __name__ == "__main__":
    main()
