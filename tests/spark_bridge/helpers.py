"""What the Spark tests share besides the ``spark`` session fixture (tests/spark_bridge/
conftest.py): clusters started per module, and records written with what the test expects
Spark to return.

Use in a test module::

    from tests.spark_bridge.helpers import module_cluster, produce, rows_of

    cluster = module_cluster("batch", brokers=2, num_partitions=2)

``module_cluster`` makes a module-scoped fixture: a Cluster in a temporary directory,
stopped at the end of the module, after which none of its shared-memory objects may be
left in /dev/shm (clients inside Spark's Python workers included).
"""
from __future__ import annotations

import re
import time

import psutil
import pytest

from cluster import Cluster, KafkaAdminClient, KafkaConsumer, KafkaProducer, NewTopic
from shm_ring.naming import list_objects
from tests.support.bounds import BOUND


def module_cluster(name, **config):
    """A module-scoped fixture running a Cluster with broker ``config`` (Cluster's keyword
    arguments)."""

    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory):
        c = Cluster(tmp_path_factory.mktemp(name), **config)
        try:
            c.start()
            yield c
        finally:
            c.stop()
            assert c.cluster_id is None or list_objects(c.cluster_id) == [], \
                f"left in /dev/shm: {list_objects(c.cluster_id)}"
    return cluster


def create_topic(cluster, name, partitions, **topic_configs):
    """Create topic ``name`` with ``partitions`` partitions (replication 1) and Kafka topic
    configs (``_`` for ``.``: ``message_timestamp_type="LogAppendTime"``)."""
    configs = {key.replace("_", "."): str(value) for key, value in topic_configs.items()}
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs)])
    cluster.wait_for_metadata(lambda image: _has_partitions(image, name, partitions))


def add_partitions(cluster, name, total):
    """Raise topic ``name`` to ``total`` partitions; return once the metadata shows them."""
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_partitions({name: total})
    cluster.wait_for_metadata(lambda image: _has_partitions(image, name, total))


def _has_partitions(image, name, count):
    topic = image.topics.get(name)
    return (topic is not None and len(topic.partitions) >= count
            and all(p.online for p in topic.partitions))


def produce(cluster, topic, count, *, start=0, partition=None, headers_every=0,
            timestamp_ms=None, size=None, batch_size=16384):
    """Write ``count`` records to ``topic`` (acks=all) and return what each became:
    ``{(partition, offset): (key, value, timestamp_ms, headers)}`` with the timestamp the
    broker reported (CreateTime or LogAppendTime) and headers as a list of (key, value),
    None when the record has none. Record i (from ``start``) has key ``k<i % 5>`` (every
    10th null) and value ``v<i>`` (padded to ``size`` bytes when given); batches of at
    most ``batch_size`` bytes."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all",
                             linger_ms=5, batch_size=batch_size, max_block_ms=BOUND * 1000)
    try:
        sent = []
        for i in range(start, start + count):
            key = None if i % 10 == 9 else b"k%d" % (i % 5)
            value = b"v%d" % i
            if size is not None:
                value = value.ljust(size, b".")
            headers = ([("h", b"%d" % i), ("empty", b"")]
                       if headers_every and i % headers_every == 0 else None)
            ts = None if timestamp_ms is None else timestamp_ms + i
            future = producer.send(topic, value, key=key, headers=headers, partition=partition,
                                   timestamp_ms=ts)
            sent.append((future, key, value, headers))
        producer.flush(BOUND)
        out = {}
        for future, key, value, headers in sent:
            meta = future.get(BOUND)
            out[(meta.partition, meta.offset)] = (key, value, meta.timestamp, headers)
        return out
    finally:
        producer.close()


def rows_of(df):
    """A ringlog DataFrame's rows as ``{(partition, offset): (key, value, timestamp_ms,
    headers)}`` (headers as a list of (key, value), None when absent)."""
    from pyspark.sql import functions as F

    has_headers = "headers" in df.columns
    cols = [F.col("partition"), F.col("offset"), F.col("key"), F.col("value"),
            F.unix_millis("timestamp").alias("ts")]
    if has_headers:
        cols.append(F.col("headers"))
    out = {}
    for row in df.select(*cols).collect():
        headers = ([(h.key, bytes(h.value)) for h in row.headers]
                   if has_headers and row.headers is not None else None)
        key = None if row.key is None else bytes(row.key)
        out[(row.partition, row.offset)] = (key, bytes(row.value), row.ts, headers)
    return out


def reader(spark, cluster, **options):
    """``spark.read.format("ringlog")`` at ``cluster`` with ``options``."""
    r = spark.read.format("ringlog").option("bootstrap.servers", cluster.bootstrap_servers)
    for name, value in options.items():
        r = r.option(name, value)
    return r


def stream_reader(spark, cluster, **options):
    """``spark.readStream.format("ringlog")`` at ``cluster`` with ``options``."""
    r = spark.readStream.format("ringlog").option("bootstrap.servers",
                                                  cluster.bootstrap_servers)
    for name, value in options.items():
        r = r.option(name, value)
    return r


def client_rings(cluster):
    """Names of the cluster's client connection objects in /dev/shm (``...c<pid>-...``),
    once every client has closed, waiting up to BOUND for Spark's workers to finish. The
    brokers' own connections to each other (a broker asking the controller for producer ids,
    a follower fetching) are not clients'."""
    brokers = {f".c{pid}-" for pid in cluster.pids().values()}
    deadline = time.monotonic() + BOUND
    while True:
        names = [n for n in list_objects(cluster.cluster_id)
                 if ".c" in n and not any(b in n for b in brokers)]
        if not names:
            return names
        if time.monotonic() >= deadline:  # name who holds them, for the failure message
            return [f"{n} ({_owner(n)})" for n in names]
        time.sleep(0.1)


def _owner(name):
    """The process whose pid a connection object's name carries: its command line, or
    that it is gone."""
    pid = int(re.search(r"\.c([0-9]+)-", name).group(1))
    try:
        return f"pid {pid}: {' '.join(psutil.Process(pid).cmdline())[:200]}"
    except psutil.Error:
        return f"pid {pid}: gone"


def log_start_offsets(cluster, partitions):
    """``{TopicPartition: log start offset}`` now."""
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers) as consumer:
        return consumer.beginning_offsets(partitions)


def wait_for_log_start(cluster, tp, above):
    """Return the log start offset of ``tp`` once retention moved it past ``above``."""
    deadline = time.monotonic() + BOUND
    while True:
        start = log_start_offsets(cluster, [tp])[tp]
        if start > above:
            return start
        assert time.monotonic() < deadline, \
            f"retention left the log start offset of {tp} at {start} within {BOUND} s"
        time.sleep(0.1)

