"""kcat (librdkafka's command-line client, from Debian) through the gateway: 20,000 keyed
lines with headers produced and consumed back, every key once with contiguous offsets;
ringlog's own consumer reads the same records; ``kcat -L`` lists the three brokers and
every partition's leader and ISR. Skipped, saying why, where kcat is not installed
(``make test`` installs it from Debian when it may)."""
from __future__ import annotations

import collections
import re
import shutil
import subprocess

import pytest

from cluster.structs import TopicPartition
from consumer_proc.consumer import KafkaConsumer
from tests.support.bounds import BOUND

KCAT = shutil.which("kcat")
pytestmark = [pytest.mark.multiprocess, pytest.mark.slow,
              pytest.mark.skipif(KCAT is None, reason="kcat is not installed (Debian package "
                                 "kcat; `make test` installs it when it may)")]

COUNT = 20_000
TOPIC = "kcat-lines"


def kcat(*args, stdin=None):
    done = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=BOUND * 2,
                          check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode()


def test_kcat_produce_consume_and_ringlog_consumer_agree(served):
    lines = "".join(f"key-{i}:value-{i}\n" for i in range(COUNT)).encode()
    kcat("-b", served.bootstrap, "-P", "-t", TOPIC, "-K:", "-H", "origin=kcat",
         "-H", "run=1", "-X", "topic.request.required.acks=-1", stdin=lines)
    out = kcat("-b", served.bootstrap, "-C", "-t", TOPIC, "-o", "beginning", "-e", "-q",
               "-f", "%k %s %p %o\n")
    rows = [line.split(" ") for line in out.splitlines()]
    assert len(rows) == COUNT
    assert sorted(r[0] for r in rows) == sorted(f"key-{i}" for i in range(COUNT))
    assert all(value == "value-" + key[4:] for key, value, _, _ in rows)
    offsets = collections.defaultdict(list)
    for _, _, partition, offset in rows:
        offsets[int(partition)].append(int(offset))
    assert set(offsets) == {0, 1, 2}  # keyed: murmur2 spreads them over the 3 partitions
    for found in offsets.values():
        assert found == list(range(len(found)))  # contiguous from 0, in order

    consumer = KafkaConsumer(bootstrap_servers=served.data_dir, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(3)])
        seen = {}
        while len(seen) < COUNT:
            batch = consumer.poll(timeout_ms=BOUND * 1000)
            assert batch, f"ringlog's consumer stopped at {len(seen)} of {COUNT} records"
            for records in batch.values():
                for r in records:
                    seen[r.key.decode()] = (r.value.decode(), r.partition, r.offset,
                                            [(k, v.decode()) for k, v in r.headers])
    finally:
        consumer.close()
    assert {k: (v, p, o) for k, (v, p, o, _) in seen.items()} == {
        r[0]: (r[1], int(r[2]), int(r[3])) for r in rows}
    assert all(h == [("origin", "kcat"), ("run", "1")] for *_, h in seen.values())


def test_kcat_metadata_lists_brokers_leaders_and_isr(served):
    kcat("-b", served.bootstrap, "-P", "-t", "kcat-meta", stdin=b"one\n")
    out = kcat("-b", served.bootstrap, "-L", "-t", "kcat-meta")
    brokers = re.findall(r"broker (\d+) at 127\.0\.0\.1:(\d+)", out)
    assert "3 brokers:" in out
    assert {int(b): int(p) for b, p in brokers} == served.gateway.ports
    partitions = re.findall(r"partition (\d+), leader (\d+), replicas: ([\d,]+), isrs: ([\d,]+)",
                            out)
    assert sorted(int(p[0]) for p in partitions) == [0, 1, 2]
    for _, leader, replicas, isrs in partitions:
        assert sorted(replicas.split(",")) == ["0", "1", "2"]
        assert leader in isrs.split(",")
