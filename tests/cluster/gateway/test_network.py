"""The gateway's network layer, on raw sockets: ApiVersions as Kafka answers it (v3 served
with response header v0, INVALID_REQUEST for a bad client software name, a newer version
the v0 body with UNSUPPORTED_VERSION), Metadata's addresses rewritten, record
batches passed byte for byte into the segment file, a garbage or oversized frame closing
that connection only (logged with the client's address), a client that never reads
stalling only itself (``queued.max.requests``), idle connections closed after
``connections.max.idle.ms``, the stats page, and a killed gateway losing no acknowledged
record while its clients reconnect."""
from __future__ import annotations

import datetime
import os
import struct
import time

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from cluster.admin.kafka_admin_client import KafkaAdminClient, NewTopic
from cluster.gateway import wire
from cluster.protocol import frames
from cluster.protocol.frames import ApiKey
from cluster.stats.reader import read_all
from segments.record.bulk import build_batches
from tests.support.bounds import BOUND
from tests.support.broker import Client
from tests.support.gateway import GatewayProcess
from tests.support.kafka_socket import call, closed_by_peer, connect, read_frame

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42


def metadata_request(topics=None):
    m = frames.request_module(ApiKey.METADATA, 8)
    return m.MetadataRequest(
        topics=None if topics is None else tuple(m.MetadataRequestTopic(name=t)
                                                 for t in topics),
        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False)


def api_versions_frame(version, correlation_id, name=b"rlib", software_version=b"0.1"):
    """ApiVersions v3+ as librdkafka and kafka-python send it: request header v2 (client id
    a non-compact string, then no tagged fields), compact strings, no tagged fields."""
    client = b"raw-test"
    body = (bytes([len(name) + 1]) + name + bytes([len(software_version) + 1])
            + software_version + b"\x00")
    header = struct.pack(">hhih", ApiKey.API_VERSIONS, version, correlation_id, len(client))
    payload = header + client + b"\x00" + body
    return struct.pack(">i", len(payload)) + payload


def read_api_versions_v3(frame):
    """(correlation id, response) read with kio's own reader: response header v0 (Kafka
    answers ApiVersions so at every version), then the v3 body to the frame's end."""
    (size, correlation_id) = struct.unpack_from(">ii", frame)
    assert size == len(frame) - 4
    cls = load_response_schema(ApiKey.API_VERSIONS, 3)
    assert not cls.__header_schema__.__flexible__
    response, consumed = entity_reader(cls)(memoryview(frame).toreadonly(), 8)
    assert 8 + consumed == len(frame)
    return correlation_id, response


def test_api_versions_v3_served_and_newer_gets_v0_and_unsupported_version(served):
    sock = connect(served.gateway.ports[0])
    with sock:
        # librdkafka 2.x's first request: answered at v3, no second round trip
        sock.sendall(api_versions_frame(3, 6, b"librdkafka", b"2.0.2"))
        correlation_id, response = read_api_versions_v3(read_frame(sock))
        assert (correlation_id, response.error_code) == (6, 0)
        # kafka-python 3's v4 probe: v0 body, UNSUPPORTED_VERSION, ApiVersions' own range
        sock.sendall(api_versions_frame(4, 7))
        frame = read_frame(sock)
        (correlation_id, error, count) = struct.unpack_from(">ihi", frame, 4)
        assert (correlation_id, error, count) == (7, UNSUPPORTED_VERSION, 1)
        assert struct.unpack_from(">hhh", frame, 14) == (ApiKey.API_VERSIONS, 0, 3)
        assert len(frame) == 20
        # the connection goes on: the client falls back to a version served
        v2 = call(sock, frames.request_class(ApiKey.API_VERSIONS, 2)(), 8)
    assert v2.error_code == 0
    advertised = {e.api_key: (e.min_version, e.max_version) for e in response.api_keys}
    assert advertised == {e.api_key: (e.min_version, e.max_version) for e in v2.api_keys}
    broker = Client(served.cluster.namespace, 0)  # the broker itself, on a ring
    try:
        broker.send(frames.request_class(ApiKey.API_VERSIONS, 2)())
        _, direct = broker.receive()
    finally:
        broker.close()
    served_by_broker = {e.api_key: (e.min_version, e.max_version) for e in direct.api_keys}
    assert advertised == {**served_by_broker, **wire.LOCAL_VERSIONS}  # exactly these
    assert advertised[ApiKey.API_VERSIONS] == (0, 3)
    assert advertised[60] == (0, 1)  # DescribeCluster, served by the gateway
    assert advertised[29] == (1, 3)  # DescribeAcls: SECURITY_DISABLED


def test_api_versions_v3_with_a_bad_software_name_is_invalid_request(served):
    with connect(served.gateway.ports[0]) as sock:
        sock.sendall(api_versions_frame(3, 11, b"bad name!", b"1.0"))
        correlation_id, response = read_api_versions_v3(read_frame(sock))
        assert (correlation_id, response.error_code, response.api_keys) == (
            11, INVALID_REQUEST, ())
        sock.sendall(api_versions_frame(3, 12, b"ok", b"1.0-"))  # must end alphanumeric
        assert read_api_versions_v3(read_frame(sock))[1].error_code == INVALID_REQUEST
        # the connection stays open, as Kafka keeps it
        sock.sendall(api_versions_frame(3, 13, b"kafka-python", b"3.0.0"))
        correlation_id, response = read_api_versions_v3(read_frame(sock))
    assert (correlation_id, response.error_code) == (13, 0)
    assert response.api_keys


def test_metadata_addresses_and_batches_byte_for_byte(served):
    admin = KafkaAdminClient(bootstrap_servers=served.data_dir)
    try:
        admin.create_topics([NewTopic("raw-bytes", 1, 3)])
    finally:
        admin.close()
    ports = served.gateway.ports
    with connect(ports[0]) as sock:
        deadline = time.monotonic() + BOUND
        while True:
            metadata = call(sock, metadata_request(["raw-bytes"]))
            (topic,) = metadata.topics
            if topic.error_code == 0 and topic.partitions[0].leader_id >= 0:
                break
            assert time.monotonic() < deadline, topic
            time.sleep(0.05)
    assert {(b.node_id, b.host, b.port) for b in metadata.brokers} == {
        (b, "127.0.0.1", p) for b, p in ports.items()}
    leader = topic.partitions[0].leader_id
    (batch,) = build_batches([b"one", b"two"], keys=[b"k1", b"k2"],
                             headers=[[("h", b"1")], [("h", b"2")]])
    batch = bytes(batch)
    m = frames.request_module(ApiKey.PRODUCE, 8)
    request = m.ProduceRequest(transactional_id=None, acks=-1,
                               timeout=datetime.timedelta(seconds=BOUND),
                               topic_data=(m.TopicProduceData(name="raw-bytes", partition_data=(
                                   m.PartitionProduceData(index=0, records=batch),)),))
    with connect(ports[leader]) as sock:
        response = call(sock, request, 3)
    (partition,) = response.responses[0].partition_responses
    assert (partition.error_code, partition.base_offset) == (0, 0)
    path = os.path.join(served.data_dir, f"broker-{leader}", "raw-bytes-0",
                        "00000000000000000000.log")
    with open(path, "rb") as file:
        stored = file.read(len(batch))
    assert stored[8:12] == batch[8:12] and stored[16:] == batch[16:]  # but offset, epoch


def test_garbage_and_oversized_frames_close_that_connection_only(served):
    gateway = served.gateway
    port = gateway.ports[1]
    bystander = connect(port)
    with bystander:
        call(bystander, metadata_request())
        for garbage in (b"\xff\xff\xff\xff",  # negative size
                        struct.pack(">i", 200 * 1024 * 1024),  # > socket.request.max.bytes
                        struct.pack(">i", 3 * 1024 * 1024),  # > a ring frame (4 MiB rings)
                        struct.pack(">ihhih", 10, 3, 8, 1, 0) + b"\x07" * 6):  # bad body
            sock = connect(port)
            with sock:
                address = "{}:{}".format(*sock.getsockname())
                sock.sendall(garbage)
                assert closed_by_peer(sock)
            deadline = time.monotonic() + BOUND
            while address not in gateway.log():
                assert time.monotonic() < deadline, f"no log line names {address}"
                time.sleep(0.05)
            assert call(bystander, metadata_request()).brokers  # still served


@pytest.fixture
def strict_gateway(served):
    """The cluster's gateway restarted with tight bounds (one gateway per data directory;
    with --kafka-port 0 each takes the ports of the one before), then as it was."""
    served.gateway.stop()
    gateway = GatewayProcess(served.data_dir, "queued.max.requests=4",
                             "connections.max.idle.ms=1000")
    try:
        yield gateway.start()
    finally:
        gateway.stop()
        served.gateway.start()


def test_one_gateway_per_data_directory(served):
    second = GatewayProcess(served.data_dir)
    with pytest.raises(AssertionError, match="already serves"):
        second.start()


def test_a_client_that_never_reads_stalls_only_itself(served, strict_gateway):
    assert strict_gateway.ports == served.gateway.ports
    port = strict_gateway.ports[2]
    frame = frames.encode_request(metadata_request(), 1, "never-reads")
    stalled = connect(port)
    with stalled:
        stalled.setblocking(False)
        sent = 0
        try:  # until the kernel's buffers and the gateway's queue are full
            for _ in range(200_000):
                sent += stalled.send(frame)
        except BlockingIOError:
            pass
        assert sent < 200_000 * len(frame), "the gateway kept reading a client that never reads"
        with connect(port) as other:
            assert call(other, metadata_request()).brokers
        pages = [s for s in read_all(served.cluster.namespace)
                 if s.role == "gateway" and s.pid == strict_gateway.popen.pid]
        deadline = time.monotonic() + BOUND
        while not pages or pages[0].counters.get("queued-requests-max", 0) < 4:
            assert time.monotonic() < deadline, pages and pages[0].counters
            time.sleep(0.2)
            pages = [s for s in read_all(served.cluster.namespace)
                     if s.role == "gateway" and s.pid == strict_gateway.popen.pid]
        counters = pages[0].counters
        assert counters["queued-requests-max"] == 4  # queued.max.requests
        assert counters["request-total:Metadata"] >= 5
        assert counters["connection-count"] >= 1


def test_pipelined_requests_past_the_queue_bound_are_all_answered_in_order(strict_gateway):
    """60 requests sent at once on one connection (queued.max.requests is 4: the gateway
    stops reading and resumes as answers go out; answers already there go out together):
    Metadata, ApiVersions and DescribeAcls (answered by the gateway itself) interleaved,
    every answer in request order."""
    requests = []
    for correlation_id in range(60):
        if correlation_id % 3 == 0:
            request = metadata_request()
        elif correlation_id % 3 == 1:
            request = frames.request_class(ApiKey.API_VERSIONS, 2)()
        else:
            request = None  # DescribeAcls v1, encoded by hand (frames does not serve it)
        requests.append(request)
    with connect(strict_gateway.ports[1]) as sock:
        payload = b""
        for correlation_id, request in enumerate(requests):
            if request is None:
                payload += describe_acls_v1(correlation_id)
            else:
                payload += frames.encode_request(request, correlation_id, "pipelined")
        sock.sendall(payload)
        for correlation_id, request in enumerate(requests):
            frame = read_frame(sock)
            assert frame, f"closed before answer {correlation_id}"
            (answered,) = struct.unpack_from(">i", frame, 4)
            assert answered == correlation_id
            if request is not None:
                frames.decode_response(frame, request.__api_key__, request.__version__)


def describe_acls_v1(correlation_id):
    """DescribeAcls v1 matching any ACL (the gateway answers SECURITY_DISABLED)."""
    client = b"pipelined"
    header = struct.pack(">hhih", wire.DESCRIBE_ACLS, 1, correlation_id, len(client))
    # resource type ANY(1), name null, pattern ANY(1), principal null, host null,
    # operation ANY(1), permission ANY(1)
    body = struct.pack(">bhbhhbb", 1, -1, 1, -1, -1, 1, 1)
    payload = header + client + body
    return struct.pack(">i", len(payload)) + payload


def test_idle_connection_closed(strict_gateway):
    sock = connect(strict_gateway.ports[0])
    with sock:
        address = "{}:{}".format(*sock.getsockname())
        started = time.monotonic()
        assert closed_by_peer(sock)
        assert time.monotonic() - started >= 0.9
    deadline = time.monotonic() + BOUND
    while f"{address} to broker 0: idle" not in strict_gateway.log():
        assert time.monotonic() < deadline, strict_gateway.log()
        time.sleep(0.05)


def test_killed_gateway_loses_no_acknowledged_record(served):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = confluent_kafka.Producer({
        "bootstrap.servers": served.bootstrap, "enable.idempotence": True, "acks": "all",
        "linger.ms": 2, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
        "message.timeout.ms": int(BOUND * 1000)})
    acked, failed = [], []

    def report(error, message):
        (failed if error else acked).append(error or message.key())
    keys = [b"g%d" % i for i in range(4000)]
    for i, key in enumerate(keys):
        producer.produce("gw-kill", key=key, value=b"x", on_delivery=report)
        producer.poll(0)
        if i == 1500:
            producer.flush(BOUND)
            served.gateway.kill()  # SIGKILL: no goodbye to any client
            served.gateway.start()  # P=0 takes the same ports again
    assert producer.flush(BOUND) == 0
    assert failed == []
    consumer = confluent_kafka.Consumer({"bootstrap.servers": served.bootstrap,
                                         "group.id": "gw-kill-reader",
                                         "auto.offset.reset": "earliest"})
    seen = []
    try:
        consumer.subscribe(["gw-kill"])
        deadline = time.monotonic() + BOUND
        while len(seen) < len(keys):
            assert time.monotonic() < deadline, f"read {len(seen)} of {len(keys)}"
            seen += [m.key() for m in consumer.consume(1000, timeout=0.5) if not m.error()]
    finally:
        consumer.close()
    assert sorted(seen) == sorted(acked) == sorted(keys)  # each acknowledged record once
