"""Real broker processes, a protocol client and metadata images, for the broker tests
(tests/replica_proc) and the end-to-end bad-input tests (tests/e2e/test_bad_input.py).

A broker runs as a real process over real rings. With ``controller=False`` it runs
``tests/support/broker_runner.py`` (no controller) and the test publishes the metadata
images itself on the cluster's metadata page; with ``controller=True`` it is
``python -m replica_proc``, whose own Controller publishes. Every wait is bounded by BOUND
seconds; fixtures kill what they started by pid and sweep the cluster's shared-memory
objects.
"""
from __future__ import annotations

import datetime
import os
import resource
import signal
import subprocess
import sys
import time
import uuid

from cluster.metadata import data_dir as dd
from cluster.metadata.model import BrokerInfo, MetadataImage, PartitionState, TopicInfo
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.responses import build
from segments.record.records import RecordBatchBuilder
from shm_ring import connect
from tests.support.bounds import BOUND
from tests.support.clock import T0
from tests.support.paths import SUPPORT

RUNNER = os.path.join(SUPPORT, "broker_runner.py")


def wait_for(condition, what, timeout=BOUND, step=0.01):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


# -- metadata images -------------------------------------------------------------------------

def make_image(cluster_id, version, topics, brokers=(0,), controller_id=-1):
    """An image where ``topics`` maps name -> (partition count, configs[, leader]); every
    partition has one replica, the leader (default broker 0), in the ISR."""
    infos = {}
    for name, spec in topics.items():
        count, configs = spec[0], spec[1]
        leader = spec[2] if len(spec) > 2 else 0
        infos[name] = TopicInfo(
            name, str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
            tuple(PartitionState(name, n, leader, 0, (leader,), (leader,))
                  for n in range(count)), dict(configs))
    return MetadataImage(version, cluster_id, controller_id,
                         {b: BrokerInfo(b, 0, True) for b in brokers}, infos)


# -- records ---------------------------------------------------------------------------------

def batch(values, timestamp=T0, key=b"k"):
    """One RecordBatch v2 (base offset 0) of ``values`` with timestamps from ``timestamp``."""
    builder = RecordBatchBuilder(0, 1 << 22)
    for n, value in enumerate(values):
        assert builder.append(timestamp + n, key, value) is not None
    return bytes(builder.build())


# -- requests --------------------------------------------------------------------------------

def _m(api, version):
    return protocol.request_module(api, version)


def produce_request(topic, partition, records, acks=1, version=8):
    m = _m(ApiKey.PRODUCE, version)
    return m.ProduceRequest(acks=acks, timeout=datetime.timedelta(seconds=10), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(
            m.PartitionProduceData(index=partition, records=records),)),))


def fetch_request(partitions, max_wait_ms=0, min_bytes=1, max_bytes=1 << 30,
                  partition_max_bytes=1 << 20, version=11, replica_id=-1):
    """``partitions``: a list of (topic, partition, fetch offset)."""
    m = _m(ApiKey.FETCH, version)
    topics = {}
    for topic, partition, offset in partitions:
        topics.setdefault(topic, []).append(m.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes))
    return build(
        m.FetchRequest, replica_id=replica_id,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes, max_bytes=max_bytes,
        topics=tuple(m.FetchTopic(topic=t, partitions=tuple(ps)) for t, ps in topics.items()),
        forgotten_topics_data=())


def list_offsets_request(topic, partition, timestamp, version=5):
    m = _m(ApiKey.LIST_OFFSETS, version)
    return build(m.ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=(
        m.ListOffsetsTopic(name=topic, partitions=(
            m.ListOffsetsPartition(partition_index=partition, timestamp=timestamp),)),))


def offsets_for_leader_epoch_request(topic, partitions, version=3, replica_id=-1):
    """``partitions``: (partition, current_leader_epoch, leader_epoch) of ``topic``."""
    m = _m(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    return build(m.OffsetForLeaderEpochRequest, replica_id=replica_id, topics=(
        m.OffsetForLeaderTopic(topic=topic, partitions=tuple(
            m.OffsetForLeaderPartition(partition=p, current_leader_epoch=current,
                                       leader_epoch=epoch)
            for p, current, epoch in partitions)),))


def metadata_request(names, allow_auto_topic_creation=True, version=8):
    m = _m(ApiKey.METADATA, version)
    topics = None if names is None else tuple(m.MetadataRequestTopic(name=n) for n in names)
    fields = {"topics": topics, "include_cluster_authorized_operations": False,
              "include_topic_authorized_operations": False}
    fields["allow_auto_topic_creation"] = allow_auto_topic_creation
    return build(m.MetadataRequest, **fields)


def api_versions_request(version=2):
    return _m(ApiKey.API_VERSIONS, version).ApiVersionsRequest()


def create_topics_request(topics, version=4):
    """``topics``: name -> (partitions, configs)."""
    m = _m(ApiKey.CREATE_TOPICS, version)
    return m.CreateTopicsRequest(topics=tuple(
        m.CreatableTopic(name=name, num_partitions=count, replication_factor=1, assignments=(),
                         configs=tuple(m.CreatableTopicConfig(name=k, value=v)
                                       for k, v in configs.items()))
        for name, (count, configs) in topics.items()), timeout=datetime.timedelta(seconds=10),
        validate_only=False)


def delete_topics_request(names, version=3):
    m = _m(ApiKey.DELETE_TOPICS, version)
    return m.DeleteTopicsRequest(topic_names=tuple(names),
                                 timeout=datetime.timedelta(seconds=10))


def create_partitions_request(name, count, version=1):
    m = _m(ApiKey.CREATE_PARTITIONS, version)
    return m.CreatePartitionsRequest(
        topics=(m.CreatePartitionsTopic(name=name, count=count, assignments=None),),
        timeout=datetime.timedelta(seconds=10), validate_only=False)


# -- a client ----------------------------------------------------------------------------------

class Client:
    """A protocol client over one shm_ring connection: send requests, read responses."""

    def __init__(self, cluster_id, broker_id=0, capacity=1 << 22):
        self.conn = connect(cluster_id, broker_id, timeout=BOUND, capacity=capacity)
        self._correlation_id = 0
        self._pending = {}  # correlation id -> request

    def send(self, request):
        self._correlation_id += 1
        frame = protocol.encode_request(request, self._correlation_id, "broker-test")
        assert self.conn.send(frame, timeout=BOUND), "request ring stayed full"
        self._pending[self._correlation_id] = request
        return self._correlation_id

    def send_raw(self, frame):
        assert self.conn.send(frame, timeout=BOUND)

    def receive(self, timeout=BOUND):
        """``(correlation id, response)`` of the next response, or None after ``timeout``."""
        frame = self.conn.recv(timeout)
        if frame is None:
            return None
        try:
            correlation_id = protocol.response_correlation_id(frame)
            request = self._pending.pop(correlation_id)
            return correlation_id, protocol.decode_response(
                frame, request.__api_key__, request.__version__)[1]
        finally:
            del frame
            self.conn.release()

    def call(self, request, timeout=BOUND):
        correlation_id = self.send(request)
        received = self.receive(timeout)
        assert received is not None, f"no response to {type(request).__name__} in {timeout} s"
        assert received[0] == correlation_id
        return received[1]

    def close(self):
        self.conn.close()


def produce_to_leader(cluster, topic, partition, records):
    """Produce ``records`` (a batch, acks=all) straight to the leader of ``topic``-
    ``partition`` in a running ``cluster`` (a Cluster), over a connection of its own; the
    partition's answer, checked to carry no error."""
    leader = cluster.metadata().topics[topic].partitions[partition].leader
    client = Client(cluster.namespace, leader)
    try:
        response = client.call(produce_request(topic, partition, records, acks=-1))
    finally:
        client.close()
    [answer] = response.responses[0].partition_responses
    assert int(answer.error_code) == 0, answer
    return answer


# -- broker processes --------------------------------------------------------------------------

class BrokerProcess:
    """One broker process of the data directory ``data_dir``."""

    def __init__(self, data_dir, broker_id=0, overrides=(), controller=False, config=None,
                 nofile=None):
        """``nofile``: the RLIMIT_NOFILE soft limit of the process (None: inherited)."""
        self.data_dir = os.fspath(data_dir)
        self.nofile = nofile
        self.broker_id = broker_id
        self.overrides = list(overrides)
        self.config = config
        self.controller = controller
        self.popen = None
        self.log_path = os.path.join(self.data_dir, f"broker-{broker_id}.test.log")

    def start(self, wait=True):
        command = ([sys.executable, "-m", "replica_proc"] if self.controller
                   else [sys.executable, RUNNER])
        command += ["--data-dir", self.data_dir, "--broker-id", str(self.broker_id)]
        if self.config is not None:
            command += ["--config", os.fspath(self.config)]
        for override in self.overrides:
            command += ["--override", override]
        with open(self.log_path, "ab") as out:
            self.popen = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, preexec_fn=self._limit)
        if wait:
            self.wait_serving()
        return self

    def _limit(self):
        """In the child before exec: lower RLIMIT_NOFILE's soft limit to ``nofile``."""
        if self.nofile is not None:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, hard))

    def wait_serving(self):
        def serving():
            assert self.popen.poll() is None, \
                f"broker exited with {self.popen.returncode}:\n{self.log()}"
            state = dd.read_broker_state(self.data_dir, self.broker_id) or {}
            return state.get("pid") == self.popen.pid and state.get("state") == "serving"
        wait_for(serving, f"broker {self.broker_id} to serve")

    @property
    def pid(self):
        return self.popen.pid

    def log(self):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self):
        """SIGTERM and wait; the exit status."""
        self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(BOUND)

    def kill(self):
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(BOUND)
