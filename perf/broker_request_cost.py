"""CPU µs and Python calls per request of the broker's request handling, in one process.

Run from the repository root: ``.venv/bin/python -m perf.broker_request_cost [--requests N]
[--value-bytes B] [--repeat K] [--profile]``.

A ``RequestHandler`` over a real ``ReplicaManager`` (one topic of one partition, RF 1, in a
temporary directory; the broker's default config: fsync on, flush policy Kafka's) is driven
by encoded request frames, as the broker's loop hands them over, on a fake connection whose
response ring is a preallocated buffer (claim/commit cost nothing). What is measured is the
request handling alone: ``RequestHandler.handle`` and everything under it (decode,
validation with its CRC check, stamp, append, HW, the answer packed), not the loop, the ring
or the wake-ups (``perf.doorbell_turn``, ``perf.ring_frame_cost``). Shapes, each as thread
CPU time ÷ requests (median of ``--repeat``):

* ``produce``: Produce v8 acks=1, one batch of one ``--value-bytes`` record per request
  (workload 7 at 10 KB: one request per value);
* ``fetch+produce``: a consumer kept up with its producer (workload 4): a Fetch v11 at the
  log end parks (max_wait 500 ms, min_bytes 1), the next Produce's HW move answers it
  with that batch; per pair;
* ``fetch``: a Fetch v11 of one batch below the HW (max_bytes one batch), answered at once
  (a consumer behind);
* ``bulk``: Produce v8 of one 1 MB batch of 100-byte records (workload 3's per-batch cost;
  the request's records are views of the frame).

``--profile``: the Python and C calls per request of each shape (cProfile's call counts) and
the top functions by own time. For A/B run the same file with ``PYTHONPATH`` at each
checkout, alternating (``PYTHONPATH=/work/main python perf/broker_request_cost.py``).
"""
from __future__ import annotations

import argparse
import cProfile
import datetime
import pstats
import shutil
import statistics
import sys
import tempfile
import time
import uuid

import numpy as np

from cluster.config import BrokerConfig
from cluster.metadata.model import BrokerInfo, MetadataImage, PartitionState, TopicInfo
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.broker_metadata import BrokerMetadata
from replica_proc.channel import Channel
from replica_proc.replica_manager import ReplicaManager
from replica_proc.request_handler import RequestHandler
from segments.record.bulk import build_batches

TOPIC = "cost"
CLUSTER = "broker-request-cost"


class _Conn:
    """The broker side of a connection whose response ring never fills."""

    name = "bench"
    max_response_frame = 1 << 24
    client_pid = 0
    sending = None

    def __init__(self):
        self._buf = memoryview(bytearray(1 << 24))
        self.responses = 0

    def recv(self):
        return None

    def release(self):
        pass

    def try_send(self, frame):
        self.responses += 1
        return True

    def claim(self, size):
        return self._buf[:size]

    def commit(self):
        self.responses += 1

    def abort(self):
        pass


class _Source:
    def __init__(self, image):
        self.image = image

    @property
    def version(self):
        return self.image.version

    def read(self):
        return self.image


class Broker:
    """Broker 0's RequestHandler with ``TOPIC``-0 led here, in ``directory``."""

    def __init__(self, directory):
        self.now = 1000.0
        config = BrokerConfig({"broker.id": 0}, data_dir=directory)
        self.replicas = ReplicaManager(0, config["log.dirs"], config, time.time,
                                       loop_clock=self.clock)
        topic = TopicInfo(TOPIC, str(uuid.uuid5(uuid.NAMESPACE_DNS, TOPIC)),
                          (PartitionState(TOPIC, 0, 0, 1, (0,), (0,)),), {})
        image = MetadataImage(1, CLUSTER, -1, {0: BrokerInfo(0, 0, True)}, {TOPIC: topic})
        self.handler = RequestHandler(0, config, self.replicas,
                                      BrokerMetadata(_Source(image), CLUSTER), None, None,
                                      self.clock)
        assert self.handler.refresh_metadata()
        self.conn = _Conn()
        self.channel = Channel(self.conn)
        self.correlation_id = 0

    def clock(self):
        return self.now

    def frame(self, request):
        self.correlation_id = protocol.next_correlation_id(self.correlation_id)
        return bytes(protocol.encode_request(request, self.correlation_id, "bench"))

    def close(self):
        self.replicas.close()


def produce_request(records):
    m = protocol.request_module(ApiKey.PRODUCE, 8)
    return m.ProduceRequest(acks=1, timeout=datetime.timedelta(seconds=30), topic_data=(
        m.TopicProduceData(name=TOPIC, partition_data=(
            m.PartitionProduceData(index=0, records=records),)),))


def fetch_request(offset, max_wait_ms=500, max_bytes=1 << 20):
    m = protocol.request_module(ApiKey.FETCH, 11)
    return m.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
        max_bytes=max_bytes, isolation_level=0, topics=(m.FetchTopic(topic=TOPIC, partitions=(
            m.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=max_bytes),
        )),), forgotten_topics_data=())


def batches(count, value_bytes, batch_size):
    rows = max(count, 1) * max(1, batch_size // (value_bytes + 20))
    values = np.random.default_rng(7).integers(65, 91, (rows, value_bytes), dtype=np.uint8)
    out = [bytes(b) for b in build_batches(values, batch_size=batch_size)]
    return out[:count]


def _timed(work, profile):
    """(CPU seconds of ``work()``, cProfile or None)."""
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    start = time.thread_time()
    work()
    cpu = time.thread_time() - start
    if profiler is not None:
        profiler.disable()
    return cpu, profiler


def run_shape(shape, requests, value_bytes, profile):
    """(CPU µs per request or pair, profiler) of one fresh broker serving ``shape``."""
    directory = tempfile.mkdtemp(prefix="ringlog-request-cost-")
    broker = Broker(directory)
    try:
        handle, channel = broker.handler.handle, broker.channel
        if shape == "bulk":
            data = batches(requests, 100, 1 << 20)
        else:
            data = batches(requests, value_bytes, value_bytes + 200)
            assert all(len(b) > value_bytes for b in data)
        produces = [broker.frame(produce_request(b)) for b in data]
        for frame in produces[:20]:  # warm up: imports, first-read checks, caches
            handle(channel, frame)
        base = broker.replicas.partition(TOPIC, 0).log.log_end_offset
        per_batch = base // 20
        produces = produces[20:]
        if shape in ("produce", "bulk"):
            def work():
                for frame in produces:
                    handle(channel, frame)
        elif shape == "fetch":
            for frame in produces:
                handle(channel, frame)
            fetches = [broker.frame(fetch_request(base + i * per_batch, 0, len(data[0])))
                       for i in range(len(produces))]

            def work():
                for frame in fetches:
                    handle(channel, frame)
        else:  # fetch+produce
            fetches = [broker.frame(fetch_request(base + i * per_batch))
                       for i in range(len(produces))]

            def work():
                for fetch, produce in zip(fetches, produces):
                    handle(channel, fetch)
                    handle(channel, produce)
            before = broker.conn.responses
        cpu, profiler = _timed(work, profile)
        if shape == "fetch+produce":
            assert broker.conn.responses - before == 2 * len(produces), "a fetch was not answered"
            assert channel.parked is None
        return cpu / len(produces) * 1e6, profiler
    finally:
        broker.close()
        shutil.rmtree(directory, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--value-bytes", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--shapes", default="produce,fetch+produce,fetch,bulk")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    for shape in args.shapes.split(","):
        count = max(40, args.requests // 50) if shape == "bulk" else args.requests
        runs = [run_shape(shape, count, args.value_bytes, False)[0]
                for _ in range(args.repeat)]
        print(f"{shape:14s} CPU µs per request{' pair' if shape == 'fetch+produce' else ''}: "
              f"median {statistics.median(runs):8.2f}  "
              f"(runs {', '.join(f'{r:.1f}' for r in runs)})", flush=True)
        if args.profile:
            _, profiler = run_shape(shape, count, args.value_bytes, True)
            stats = pstats.Stats(profiler)
            calls = sum(v[1] for v in stats.stats.values())
            print(f"  calls per request: {calls / (count - 20):.1f}")
            stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
