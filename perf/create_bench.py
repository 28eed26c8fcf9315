"""Creating many partitions on one broker: ``ReplicaManager.apply`` of one metadata image.

    .venv/bin/python -m perf.create_bench [--partitions 10000] [--repeats 1]

A broker's replica manager (no process, no rings) applies an image placing one topic of
N partitions on it, in a fresh log directory under /tmp (a real file system: the cost is
the fsyncs); printed: the time of the ``apply``, per partition, and the fsync and
fdatasync calls it made (counted by wrapping ``os.fsync`` and ``os.fdatasync``). Then the
same directory is opened again by a new replica manager (a broker restart: clean open).
The directory is deleted at the end.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import uuid

from cluster.config import BrokerConfig
from cluster.metadata.model import BrokerInfo, MetadataImage, PartitionState, TopicInfo
from replica_proc.replica_manager import ReplicaManager

TOPIC = "created"


def image(partitions):
    """Version 1: ``TOPIC`` with ``partitions`` partitions, all led by broker 0."""
    info = TopicInfo(TOPIC, str(uuid.uuid5(uuid.NAMESPACE_DNS, TOPIC)),
                     tuple(PartitionState(TOPIC, n, 0, 0, (0,), (0,))
                           for n in range(partitions)), {})
    return MetadataImage(1, "create-bench", -1, {0: BrokerInfo(0, 0, True)}, {TOPIC: info})


class SyncCounter:
    """Counts os.fsync and os.fdatasync calls while installed (this thread and the
    flusher's)."""

    def __init__(self):
        self.calls = 0
        self._saved = {}

    def __enter__(self):
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name)
            self._saved[name] = real

            def counted(fd, real=real):
                self.calls += 1
                return real(fd)
            setattr(os, name, counted)
        return self

    def __exit__(self, *exc):
        for name, real in self._saved.items():
            setattr(os, name, real)


def run(partitions):
    root = tempfile.mkdtemp(prefix="ringlog-create-bench-", dir="/tmp")
    try:
        config = BrokerConfig({"broker.id": 0}, data_dir=root)
        manager = ReplicaManager(0, config["log.dirs"], config)
        with SyncCounter() as syncs:
            start = time.perf_counter()
            manager.apply(image(partitions))
            created = time.perf_counter() - start
        assert len(manager) == partitions
        manager.close()
        again = ReplicaManager(0, config["log.dirs"], config)
        start = time.perf_counter()
        again.apply(image(partitions))
        reopened = time.perf_counter() - start
        assert len(again) == partitions
        assert all(again.offline(TOPIC, n) is None for n in range(partitions))
        again.close()
        return created, syncs.calls, reopened
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    for _ in range(args.repeats):
        created, syncs, reopened = run(args.partitions)
        print(f"create {args.partitions} partitions: {created:.2f} s "
              f"({created / args.partitions * 1e3:.2f} ms each, {syncs} fsync/fdatasync "
              f"calls = {syncs / args.partitions:.1f} each); reopen: {reopened:.2f} s")


if __name__ == "__main__":
    main()
