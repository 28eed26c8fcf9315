"""ringlog through its Kafka wire gateway, driven by confluent-kafka (librdkafka) over
loopback TCP: the same cluster as the ``ringlog`` peer (``peers.ringlog.Deployment``) plus
``ringlog gateway --kafka-port 0``; labelled a Kafka client's view of ringlog, not Apache
Kafka. Workloads 1 and 2 (``workloads.RUNS``): beside the ``ringlog`` peer in the same run,
its ratio is the gateway's own cost for a Kafka client (a C client against ringlog's
Python client, so a ratio above 1 says the gateway is not the limit).

* producer: ``Producer.produce()`` per record (acks as the task's, linger.ms 5,
  batch.size 16 KB, no idempotence: the ``ringlog`` peer's settings), ``flush()``;
* consumer: ``Consumer.assign()`` of the task's partitions from the beginning,
  ``consume()`` in batches of up to 10,000.

The gateway is one of the servers whose RSS is reported.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from perf.suite import latency, payloads
from perf.suite.peers import ringlog

NAME = "ringlog_gateway"
DESCRIPTION = ("ringlog through its Kafka wire gateway on loopback TCP, confluent-kafka "
               "(librdkafka) clients; acks=1; produce()/consume()")
START_BOUND = 60.0


def missing(options):
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return "confluent-kafka is not installed (pip install confluent-kafka)"
    return None


class Deployment(ringlog.Deployment):
    """The ``ringlog`` peer's cluster and a gateway process serving it."""

    def __init__(self, workdir, channels, brokers, replication=1):
        super().__init__(workdir, channels, brokers, replication)
        self.gateway = None
        try:
            self.gateway = subprocess.Popen(
                [sys.executable, "-m", "cluster.tools.gateway_cmd", "--data-dir",
                 self.data_dir, "--kafka-port", "0"], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            bootstrap = self._wait_serving()
        except BaseException:
            self.stop()
            raise
        self.endpoint = dict(self.endpoint, bootstrap=bootstrap)

    def _wait_serving(self):
        path = os.path.join(self.data_dir, "gateway.json")
        deadline = time.monotonic() + START_BOUND
        while time.monotonic() < deadline:
            try:
                with open(path) as file:
                    record = json.load(file)
                if record.get("pid") == self.gateway.pid and record.get("state") == "serving":
                    return record["bootstrap"]
            except (FileNotFoundError, json.JSONDecodeError):
                pass
            if self.gateway.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"the gateway of {self.data_dir} did not serve")

    def server_pids(self):
        gateway = [] if self.gateway is None else [self.gateway.pid]
        return super().server_pids() + gateway

    def stop(self):
        if self.gateway is not None and self.gateway.poll() is None:
            self.gateway.terminate()
            try:
                self.gateway.wait(30)
            except subprocess.TimeoutExpired:
                self.gateway.kill()
                self.gateway.wait()
        super().stop()


def deploy(workdir, channels, brokers, options):
    return Deployment(workdir, channels, brokers, options.get("replication", 1))


def produce(endpoint, task, gate):
    from confluent_kafka import Producer
    topic = endpoint["topic"]
    every = len(task.channels) == endpoint["partitions"]
    partition = -1 if every else task.channels[0]  # -1: librdkafka's partitioner
    producer = Producer({"bootstrap.servers": endpoint["bootstrap"],
                         "acks": "all" if task.acks == "all" else 1, "linger.ms": 5,
                         "batch.size": 16384, "enable.idempotence": False})
    pool = payloads.pool(task.size)
    n = len(pool)
    gate.ready()
    first = latency.clock_ns()
    produce_one = producer.produce
    for i in range(task.records):
        while True:
            try:
                produce_one(topic, pool[i % n], partition=partition)
                break
            except BufferError:  # the local queue is full: serve delivery reports
                producer.poll(0.005)
    if producer.flush(task.timeout) != 0:
        raise TimeoutError(f"producer {task.index}: records undelivered after "
                           f"{task.timeout} s")
    last = latency.clock_ns()
    return {"records": task.records, "first_ns": first, "last_ns": last}


def consume(endpoint, task, gate):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": endpoint["bootstrap"],
                         "group.id": f"{ringlog.GROUP}-{task.index}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(endpoint["topic"], p, OFFSET_BEGINNING)
                         for p in task.channels])
        count = 0
        first = last = None
        gate.ready()
        while not gate.expired():
            messages = consumer.consume(10_000, timeout=ringlog.POLL_MS / 1000)
            received = sum(1 for m in messages if m.error() is None)
            if not received:
                if gate.received(count):
                    break
                continue
            now = latency.clock_ns()
            first = now if first is None else first
            last = now
            count += received
            if gate.received(count):
                break
    finally:
        consumer.close()
    return latency.receiver_figures(count, first, last, None)
