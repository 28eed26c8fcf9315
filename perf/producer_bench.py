"""KafkaProducer throughput — ``send()`` one record at a time, and the bulk ``send_batch`` —
and latency.

    .venv/bin/python -m perf.producer_bench [--repeat 5] [--records 300000]
                                            [--bulk-records 2000000] [--latency-records 5000]
                                            [--no-cluster]

The standard workload: 100-byte values, no keys, acks=1, one partition, batch_size 16384,
linger_ms 5; the clock runs from the first send until flush() returns (every record
acknowledged). For ``send()`` the run also reports the CPU time per record of the calling
thread (``send()`` itself) and of the sender thread (batches, requests, responses): both
hold one GIL, so their sum bounds the rate. Latency: records sent at 10,000 records/s with
linger_ms 0, each timed from just before ``send()`` to its callback (the broker's
acknowledgement, in the sender thread) — the producer's share of Kafka's end-to-end figure.
Two brokers in their own process:

* ``sink``: a Listener that decodes each Produce request and acknowledges it without
  storing anything — the client's own cost plus the ring transport;
* ``broker``: a real one-broker ringlog cluster (``Cluster``), appending to its log.

Peers in the same run, for scale: ``builder``, RecordBatchBuilder.append + build alone —
the floor under send()'s per-record work, as the accumulator must use it; ``bulk encode``,
segments.record.bulk.build_batches alone — the floor under send_batch. Prints the median
records/s over repeats and the ratios; for latency the median over repeats of each run's
p50 and p99.
"""
from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time

import numpy as np
from kio.schema.errors import ErrorCode

from cluster.client.kafka_client import API_VERSIONS
from cluster.metadata import data_dir as dd
from cluster.metadata.model import BrokerInfo, MetadataImage, PartitionState, TopicInfo
from cluster.metadata.page import MetadataPage
from cluster.producer.kafka_producer import KafkaProducer
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from cluster.supervisor.cluster import Cluster
from segments.record.batch_header import BatchHeader
from segments.record.bulk import build_batches
from segments.record.records import RecordBatchBuilder
from shm_ring import Listener
from shm_ring.naming import cleanup_stale

TOPIC = "bench"
VALUE = b"v" * 100
PRODUCER = dict(acks=1, linger_ms=5, batch_size=16384, enable_idempotence=False)
LATENCY_PRODUCER = dict(acks=1, linger_ms=0, enable_idempotence=False)
#: Records per second of the latency run (the project's end-to-end latency goal's rate).
LATENCY_RATE = 10_000
_NO_TIME = datetime.timedelta(0)


# -- the sink broker ------------------------------------------------------------------------------

def _metadata_answer(cluster_id):
    m = protocol.response_module(ApiKey.METADATA, API_VERSIONS[ApiKey.METADATA])
    partition = m.MetadataResponsePartition(
        error_code=ErrorCode.none, partition_index=0, leader_id=0, leader_epoch=0,
        replica_nodes=(0,), isr_nodes=(0,))
    return m.MetadataResponse(
        throttle_time=_NO_TIME, cluster_id=cluster_id, controller_id=0,
        brokers=(m.MetadataResponseBroker(node_id=0, host="sink", port=0),),
        topics=(m.MetadataResponseTopic(error_code=ErrorCode.none, name=TOPIC,
                                        partitions=(partition,)),))


def _produce_answer(request, next_offset):
    """(ProduceResponse or None for acks=0, the next offset) for a Produce request."""
    m = protocol.response_module(ApiKey.PRODUCE, API_VERSIONS[ApiKey.PRODUCE])
    partitions = []
    for topic in request.topic_data:
        for data in topic.partition_data:
            partitions.append(m.PartitionProduceResponse(
                index=data.index, error_code=ErrorCode.none, base_offset=next_offset,
                record_errors=()))
            next_offset += BatchHeader(data.records).record_count
    if request.acks == 0:
        return None, next_offset
    return m.ProduceResponse(responses=(m.TopicProduceResponse(
        name=TOPIC, partition_responses=tuple(partitions)),)), next_offset


def _sink(cluster_id, ready, stop):
    """Serve ApiVersions, Metadata (one topic, one partition, led by broker 0) and Produce
    (acknowledged, not stored) until ``stop`` is set."""
    listener = Listener(cluster_id, 0)
    metadata = _metadata_answer(cluster_id)
    next_offset = 0
    ready.set()
    while not stop.is_set():
        listener.wait(timeout=0.05)
        listener.accept_pending()
        for connection in listener.ready():
            while (frame := connection.recv()) is not None:
                header, request = protocol.decode_request(frame)
                del frame
                key = header.request_api_key
                if key == ApiKey.API_VERSIONS:
                    response = protocol.api_versions_response(header.request_api_version)
                elif key == ApiKey.METADATA:
                    response = metadata
                else:
                    response, next_offset = _produce_answer(request, next_offset)
                    if response is None:
                        continue
                answer = protocol.encode_response(response, header.correlation_id)
                while not connection.try_send(answer):
                    listener.wait(timeout=0.05)
            connection.release()
        listener.reap()
    listener.close()


class SinkCluster:
    """A data directory, a metadata page and the sink broker in a child process."""

    def __init__(self):
        self.data_dir = tempfile.mkdtemp(prefix="ringlog-bench-")
        self.cluster_id = dd.ensure_cluster_id(self.data_dir)
        self.page = MetadataPage.create(self.cluster_id)
        self.page.publish(MetadataImage(1, self.cluster_id, 0, {0: BrokerInfo(0, 0, True)}, {
            TOPIC: TopicInfo(TOPIC, "0", (PartitionState(TOPIC, 0, 0, 0, (0,), (0,)),))}))
        context = multiprocessing.get_context("fork")
        ready, self._stop = context.Event(), context.Event()
        self._process = context.Process(target=_sink, args=(self.cluster_id, ready, self._stop),
                                        daemon=True)
        self._process.start()
        ready.wait(10)
        self.bootstrap_servers = self.data_dir

    def close(self):
        self._stop.set()
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self.page.unlink()
        self.page.close()
        cleanup_stale(self.cluster_id)
        shutil.rmtree(self.data_dir, ignore_errors=True)


# -- workloads ------------------------------------------------------------------------------------

def run_send(bootstrap, records, cpu):
    """send() records/s; appends (caller µs/record, sender µs/record) of CPU to ``cpu``."""
    with KafkaProducer(bootstrap_servers=bootstrap, **PRODUCER) as producer:
        producer.send(TOPIC, VALUE).get(30)  # metadata, connection
        send = producer.send
        sender = time.pthread_getcpuclockid(producer._sender.ident)
        caller_start, sender_start = time.thread_time(), time.clock_gettime(sender)
        start = time.perf_counter()
        for _ in range(records):
            send(TOPIC, VALUE)
        producer.flush(120)
        elapsed = time.perf_counter() - start
        cpu.append(((time.thread_time() - caller_start) / records * 1e6,
                    (time.clock_gettime(sender) - sender_start) / records * 1e6))
        return records / elapsed


def run_latency(bootstrap, records):
    """(p50, p99) in µs of send() -> acknowledged, at LATENCY_RATE records/s, linger 0."""
    latencies = np.zeros(records, dtype=np.int64)
    clock = time.perf_counter_ns
    with KafkaProducer(bootstrap_servers=bootstrap, **LATENCY_PRODUCER) as producer:
        for _ in range(100):  # warm up: connection, metadata, buffers
            producer.send(TOPIC, VALUE).get(30)
        start = time.perf_counter()
        for i in range(records):
            sent = clock()
            producer.send(TOPIC, VALUE).add_callback(
                lambda _, i=i, sent=sent: latencies.__setitem__(i, clock() - sent))
            ahead = start + (i + 1) / LATENCY_RATE - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
        producer.flush(60)
    micros = latencies / 1000
    return float(np.percentile(micros, 50)), float(np.percentile(micros, 99))


def run_bulk(bootstrap, records):
    values = np.full((records, len(VALUE)), ord("v"), dtype=np.uint8)
    with KafkaProducer(bootstrap_servers=bootstrap, **PRODUCER) as producer:
        producer.send(TOPIC, VALUE).get(30)
        start = time.perf_counter()
        futures = producer.send_batch(TOPIC, values)
        producer.flush(120)
        elapsed = time.perf_counter() - start
        assert sum(f.get(0).record_count for f in futures) == records
        return records / elapsed


def run_builder(records):
    start = time.perf_counter()
    builder = RecordBatchBuilder(0, 16384)
    for _ in range(records):
        if builder.append(None, None, VALUE) is None:
            builder.build()
            builder = RecordBatchBuilder(0, 16384)
            builder.append(None, None, VALUE)
    builder.build()
    return records / (time.perf_counter() - start)


def run_bulk_encode(records):
    values = np.full((records, len(VALUE)), ord("v"), dtype=np.uint8)
    start = time.perf_counter()
    build_batches(values, batch_size=1 << 20)
    return records / (time.perf_counter() - start)


def median_of(repeat, run, *args):
    figures = [run(*args) for _ in range(repeat)]
    return statistics.median(figures), figures


def measure_target(name, bootstrap, args, results, cpu, latency):
    send_cpu = []
    results[f"send() -> {name}"] = median_of(args.repeat, run_send, bootstrap, args.records,
                                             send_cpu)
    cpu[name] = (statistics.median(c for c, _ in send_cpu),
                 statistics.median(s for _, s in send_cpu))
    results[f"send_batch -> {name}"] = median_of(args.repeat, run_bulk, bootstrap,
                                                 args.bulk_records)
    if args.latency_records:
        runs = [run_latency(bootstrap, args.latency_records) for _ in range(args.repeat)]
        latency[name] = (statistics.median(p50 for p50, _ in runs),
                         statistics.median(p99 for _, p99 in runs), runs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--bulk-records", type=int, default=2_000_000)
    parser.add_argument("--latency-records", type=int, default=5_000,
                        help="records per latency run at 10,000/s (0: no latency runs)")
    parser.add_argument("--no-cluster", action="store_true",
                        help="skip the real broker (sink only)")
    args = parser.parse_args(argv)
    results, cpu, latency = {}, {}, {}
    results["builder (floor of send)"] = median_of(args.repeat, run_builder, args.records)
    results["bulk encode (floor of send_batch)"] = median_of(args.repeat, run_bulk_encode,
                                                             args.bulk_records)
    sink = SinkCluster()
    try:
        measure_target("sink", sink.bootstrap_servers, args, results, cpu, latency)
    finally:
        sink.close()
    if not args.no_cluster:
        data_dir = tempfile.mkdtemp(prefix="ringlog-bench-")
        try:
            with Cluster(data_dir, brokers=1, num_partitions=1) as cluster:
                measure_target("broker", cluster.bootstrap_servers, args, results, cpu,
                               latency)
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
    print(f"KafkaProducer, 100-byte values, acks=1, one partition; median of {args.repeat} "
          f"(pid {os.getpid()}, {os.cpu_count()} CPUs)")
    for name, (median, figures) in results.items():
        spread = ", ".join(f"{f / 1e6:.2f}" for f in figures)
        print(f"  {name:36s} {median / 1e6:7.3f} M records/s   [{spread}]")
    for name, (caller, sender) in cpu.items():
        print(f"  send() -> {name}: CPU per record     caller {caller:.2f} us + sender "
              f"{sender:.2f} us = {caller + sender:.2f} us (one GIL: at most "
              f"{1 / (caller + sender):.2f} M records/s)")
    for name, (p50, p99, runs) in latency.items():
        spread = ", ".join(f"{a:.0f}/{b:.0f}" for a, b in runs)
        print(f"  send() -> ack, {name}, {LATENCY_RATE} records/s, linger 0: p50 {p50:.0f} us,"
              f" p99 {p99:.0f} us   [p50/p99: {spread}]")
    ratios = [("send() -> sink / builder", "send() -> sink", "builder (floor of send)"),
              ("send_batch -> sink / bulk encode", "send_batch -> sink",
               "bulk encode (floor of send_batch)"),
              ("send() -> broker / sink", "send() -> broker", "send() -> sink"),
              ("send_batch -> broker / sink", "send_batch -> broker", "send_batch -> sink")]
    for label, top, bottom in ratios:
        if top in results and bottom in results:
            print(f"  {label:36s} {results[top][0] / results[bottom][0]:7.2f}")


if __name__ == "__main__":
    main()
