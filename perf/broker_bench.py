"""The broker's hot paths, Produce and Fetch, measured end to end against their floors.

    .venv/bin/python -m perf.broker_bench [--repeats 5] [--batches 2000]

A real broker process (``python -m replica_proc``, its own controller, a metadata page made
here) serves a one-partition topic; this process is the client, over a real connection
(4 MiB rings). The workload is 16 KB RecordBatch v2 batches of 100-byte values. Measured:

* produce:     Produce v8 (acks=1), one batch per request, 16 requests in flight
* fetch:       Fetch v11 of up to 1 MB at a time, one request in flight, from offset 0 to
               the end of what ``produce`` wrote (records decoded by nobody: the client
               only takes the bytes, kio's decode copies them out of the ring)
* round trip:  one Produce of a batch, then one Fetch of that batch, one after the other:
               the latency of getting 16 KB into the log and back, as MB/s of batches

Floors, measured in the same run:

* ring echo:   a child process echoes 16 KB frames over the same kind of connection,
               one in flight (the transport's round trip; a broker round trip is two)
* log only:    ``PartitionLog.append`` then ``read_slice`` + ``read_into`` a buffer of the
               same batches, in this process (the storage work the broker does per batch)

Broker and client are pinned to different CPUs when there are two. Figures are medians of
the repeats; the broker's data directory is under /tmp and deleted at the end.
"""
from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from cluster.metadata import data_dir as dd
from cluster.metadata.page import MetadataPage
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.responses import build
from segments.log import PartitionLog
from segments.record.bulk import build_batches
from shm_ring import Listener, cleanup_stale, connect

MB = 1e6
BATCH_SIZE = 16 * 1024
VALUE_SIZE = 100
RING = 1 << 22
IN_FLIGHT = 16
FETCH_BYTES = 1 << 20
TIMEOUT = 30.0
TOPIC = "bench"
CTX = multiprocessing.get_context("fork")


def make_batches(count):
    values = np.random.default_rng(7).integers(0, 256, (count * 170, VALUE_SIZE),
                                               dtype=np.uint8)
    batches = [bytes(b) for b in build_batches(values, batch_size=BATCH_SIZE)]
    return batches[:count]


class BenchClient:
    def __init__(self, cluster_id):
        self.conn = connect(cluster_id, 0, timeout=TIMEOUT, capacity=RING)
        self.correlation_id = 0
        self.produce = protocol.request_module(ApiKey.PRODUCE, 8)
        self.fetch = protocol.request_module(ApiKey.FETCH, 11)

    def send(self, request):
        self.correlation_id = protocol.next_correlation_id(self.correlation_id)
        frame = protocol.encode_request(request, self.correlation_id, "bench")
        if not self.conn.send(frame, timeout=TIMEOUT):
            raise TimeoutError("request ring full for too long")

    def receive(self, api_key, version):
        frame = self.conn.recv(TIMEOUT)
        if frame is None:
            raise TimeoutError("no response from the broker")
        try:
            return protocol.decode_response(frame, api_key, version)[1]
        finally:
            del frame
            self.conn.release()

    def call(self, request):
        self.send(request)
        return self.receive(request.__api_key__, request.__version__)

    def produce_request(self, records):
        m = self.produce
        return m.ProduceRequest(acks=1, timeout=datetime.timedelta(seconds=30), topic_data=(
            m.TopicProduceData(name=TOPIC, partition_data=(
                m.PartitionProduceData(index=0, records=records),)),))

    def fetch_request(self, offset, max_bytes=FETCH_BYTES):
        m = self.fetch
        return m.FetchRequest(max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=max_bytes,
                              topics=(m.FetchTopic(topic=TOPIC, partitions=(m.FetchPartition(
                                  partition=0, fetch_offset=offset,
                                  partition_max_bytes=max_bytes),)),),
                              forgotten_topics_data=())

    def close(self):
        self.conn.close()


# -- the broker workloads ----------------------------------------------------------------------

def run_produce(client, batches):
    """Seconds to produce every batch, IN_FLIGHT requests at a time; the last offset."""
    requests = [client.produce_request(b) for b in batches]
    start = time.perf_counter()
    outstanding = 0
    last = None
    for request in requests:
        if outstanding == IN_FLIGHT:
            last = client.receive(ApiKey.PRODUCE, 8)
            outstanding -= 1
        client.send(request)
        outstanding += 1
    for _ in range(outstanding):
        last = client.receive(ApiKey.PRODUCE, 8)
    elapsed = time.perf_counter() - start
    partition = last.responses[0].partition_responses[0]
    assert partition.error_code == 0, partition
    return elapsed


def run_fetch(client, start_offset, end_offset):
    """Seconds and bytes to fetch offsets start..end, 1 MB at a time."""
    offset, total = start_offset, 0
    start = time.perf_counter()
    while offset < end_offset:
        response = client.call(client.fetch_request(offset))
        partition = response.responses[0].partitions[0]
        records = partition.records
        assert partition.error_code == 0 and records, partition
        total += len(records)
        # the next offset: after the last batch (its header: base offset + last delta)
        last_base = _last_batch_base(records)
        offset = last_base
    return time.perf_counter() - start, total


def _last_batch_base(records):
    position, next_offset = 0, 0
    while position < len(records):
        base = int.from_bytes(records[position:position + 8], "big")
        length = int.from_bytes(records[position + 8:position + 12], "big")
        delta = int.from_bytes(records[position + 23:position + 27], "big")
        next_offset = base + delta + 1
        position += 12 + length
    return next_offset


def run_round_trip(client, batches, first_offset):
    """Seconds to produce then fetch each batch, one after the other."""
    offset = first_offset
    requests = [client.produce_request(b) for b in batches]
    start = time.perf_counter()
    for request, batch in zip(requests, batches):
        response = client.call(request)
        base = response.responses[0].partition_responses[0].base_offset
        assert base == offset
        fetched = client.call(client.fetch_request(base, len(batch)))
        records = fetched.responses[0].partitions[0].records
        assert len(records) == len(batch)
        offset = _last_batch_base(records)
    return time.perf_counter() - start


# -- the floors --------------------------------------------------------------------------------

def _echo(cluster_id, broker_id, ready, stop):
    listener = Listener(cluster_id, broker_id)
    ready.set()
    try:
        while not stop.is_set():
            listener.wait(0.05)
            listener.accept_pending()
            for conn in listener.ready():
                while (frame := conn.recv()) is not None:
                    while not conn.try_send(frame):
                        listener.wait(0.01)
                    del frame
                conn.release()
            listener.reap()
    finally:
        listener.close()


def run_echo(cluster_id, batches, repeats, pin):
    ready, stop = CTX.Event(), CTX.Event()
    process = CTX.Process(target=_echo, args=(cluster_id, 1, ready, stop), daemon=True)
    process.start()
    try:
        pin(process.pid, 0)
        ready.wait(TIMEOUT)
        conn = connect(cluster_id, 1, timeout=TIMEOUT, capacity=RING)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for batch in batches:
                conn.send(batch, timeout=TIMEOUT)
                view = conn.recv(TIMEOUT)
                del view
                conn.release()
            times.append(time.perf_counter() - start)
        conn.close()
        return times
    finally:
        stop.set()
        process.join(TIMEOUT)
        if process.is_alive():
            os.kill(process.pid, signal.SIGKILL)


def run_log_only(directory, batches, repeats):
    times = []
    buffer = memoryview(bytearray(BATCH_SIZE * 2))
    for n in range(repeats):
        log = PartitionLog(os.path.join(directory, f"floor-{n}"))
        start = time.perf_counter()
        for batch in batches:
            first, _ = log.append(batch)
            log.read_slice(first, len(batch)).read_into(buffer)
        times.append(time.perf_counter() - start)
        log.close()
    return times


# -- main --------------------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, default=2000)
    args = parser.parse_args(argv)
    batches = make_batches(args.batches)
    batch_bytes = sum(len(b) for b in batches)
    records = sum(int.from_bytes(b[57:61], "big") for b in batches)  # recordCount @57
    cpus = sorted(os.sched_getaffinity(0))

    def pin(pid, which):
        if len(cpus) >= 2:
            os.sched_setaffinity(pid, {cpus[which]})

    directory = tempfile.mkdtemp(prefix="broker-bench-", dir="/tmp")
    cluster_id = dd.ensure_cluster_id(directory)
    page = MetadataPage.create(cluster_id)
    broker = None
    try:
        with open(os.path.join(directory, "broker.log"), "wb") as out:
            broker = subprocess.Popen(
                [sys.executable, "-m", "replica_proc", "--data-dir", directory,
                 "--broker-id", "0", "--override", "log.segment.bytes=1073741824"],
                stdout=out, stderr=subprocess.STDOUT)
        pin(broker.pid, 0)
        pin(0, 1)
        client = _wait_for_topic(cluster_id, broker)
        produce, fetch, round_trip = [], [], []
        for _ in range(args.repeats):
            produce.append(run_produce(client, batches))
            seconds, fetched = run_fetch(client, 0, _end_offset(client))
            fetch.append((seconds, fetched))
        end = _end_offset(client)
        for _ in range(args.repeats):
            round_trip.append(run_round_trip(client, batches[:500], end))
            end = _end_offset(client)
        client.close()
        echo = run_echo(cluster_id, batches[:500], args.repeats, pin)
        pin(0, 1)
        floor = run_log_only(directory, batches[:500], args.repeats)
    finally:
        if broker is not None:
            broker.send_signal(signal.SIGTERM)
            try:
                broker.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                broker.kill()
        page.unlink()
        page.close()
        cleanup_stale(cluster_id)
        shutil.rmtree(directory, ignore_errors=True)

    rt_bytes = sum(len(b) for b in batches[:500])
    produce_s = statistics.median(produce)
    fetch_rate = statistics.median(b / s for s, b in fetch)
    rt_s, echo_s, floor_s = (statistics.median(x) for x in (round_trip, echo, floor))
    print(f"workload: {len(batches)} batches of ~{batch_bytes // len(batches)} B "
          f"({VALUE_SIZE}-byte values, {records / len(batches):.0f} per batch); "
          f"medians of {args.repeats}")
    print(f"produce (acks=1, {IN_FLIGHT} in flight) {batch_bytes / produce_s / MB:8.1f} MB/s  "
          f"{len(batches) / produce_s:9.0f} batches/s  "
          f"{records / produce_s:11,.0f} records/s")
    print(f"fetch (1 MB requests)              {fetch_rate / MB:8.1f} MB/s")
    print(f"round trip (produce, then fetch)   {rt_bytes / rt_s / MB:8.1f} MB/s  "
          f"{rt_s / 500 * 1e6:9.1f} us per 16 KB batch")
    print(f"  floor: ring echo of 16 KB        {rt_bytes / echo_s / MB:8.1f} MB/s  "
          f"{echo_s / 500 * 1e6:9.1f} us per round trip")
    print(f"  floor: log append+read only      {rt_bytes / floor_s / MB:8.1f} MB/s  "
          f"{floor_s / 500 * 1e6:9.1f} us per batch")
    print(f"ratios: round trip / ring echo {rt_s / echo_s:.2f}x the time; "
          f"round trip / (2 echoes + log) {rt_s / (2 * echo_s + floor_s):.2f}x")
    return 0


def _wait_for_topic(cluster_id, broker):
    deadline = time.monotonic() + TIMEOUT
    client = None
    while True:
        if broker.poll() is not None:
            raise RuntimeError(f"the broker exited with {broker.returncode}")
        try:
            if client is None:
                client = BenchClient(cluster_id)
            m = protocol.request_module(ApiKey.CREATE_TOPICS, 4)
            response = client.call(m.CreateTopicsRequest(
                topics=(m.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1,
                                         assignments=(), configs=()),),
                timeout=datetime.timedelta(seconds=10), validate_only=False))
            code = response.topics[0].error_code
            if code in (0, 36):  # created, or already exists
                return client
        except (ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("the broker did not create the topic in time")
        time.sleep(0.05)


def _end_offset(client):
    m = protocol.request_module(ApiKey.LIST_OFFSETS, 5)
    response = client.call(build(m.ListOffsetsRequest, replica_id=-1, isolation_level=0,
                                 topics=(m.ListOffsetsTopic(name=TOPIC, partitions=(
                                     m.ListOffsetsPartition(partition_index=0,
                                                            timestamp=-1),)),)))
    return response.topics[0].partitions[0].offset


if __name__ == "__main__":
    sys.exit(main())
