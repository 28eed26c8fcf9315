"""What the gateway reads and rewrites in frames (``cluster.gateway.wire``), and its
settings (``cluster.gateway.config``): no process."""
from __future__ import annotations

import datetime
import struct

import pytest
from kio.schema.errors import ErrorCode

from cluster.errors import InvalidConfigurationError, InvalidRequestError
from cluster.gateway import wire
from cluster.gateway.config import GatewayConfig
from cluster.metadata.model import BrokerInfo, MetadataImage
from cluster.protocol import frames
from cluster.protocol.frames import ApiKey
from replica_proc.responses import NO_THROTTLE

PORTS = {0: 9092, 1: 9093, 2: 9094}


def produce_frame(acks, transactional_id=None):
    m = frames.request_module(ApiKey.PRODUCE, 8)
    return frames.encode_request(m.ProduceRequest(
        transactional_id=transactional_id, acks=acks, timeout=datetime.timedelta(seconds=1),
        topic_data=()), 5, "client")


def test_peek_and_acks():
    frame = produce_frame(0, "txn")
    assert wire.peek_request(frame) == (ApiKey.PRODUCE, 8, 5)
    assert not wire.expects_response(frame, ApiKey.PRODUCE)
    assert wire.expects_response(produce_frame(-1), ApiKey.PRODUCE)
    assert wire.expects_response(produce_frame(1), ApiKey.PRODUCE)
    with pytest.raises(InvalidRequestError, match="shorter than a request header"):
        wire.peek_request(b"\x00\x00\x00\x02\x00\x03")


def test_metadata_brokers_rewritten_rest_unchanged():
    m = frames.response_module(ApiKey.METADATA, 8)
    brokers = tuple(m.MetadataResponseBroker(node_id=b, host=f"/ringlog.x.b{b}.listener",
                                             port=b, rack=None) for b in range(3))
    topic = m.MetadataResponseTopic(
        error_code=ErrorCode.none, name="t", is_internal=False, partitions=(
        m.MetadataResponsePartition(error_code=ErrorCode.none, partition_index=0, leader_id=1,
                                    leader_epoch=0, replica_nodes=(1, 2),
                                    isr_nodes=(1, 2), offline_replicas=()),),
        topic_authorized_operations=-2147483648)
    response = m.MetadataResponse(throttle_time=NO_THROTTLE, brokers=brokers, cluster_id="c",
                                  controller_id=1, topics=(topic,),
                                  cluster_authorized_operations=-2147483648)
    frame = frames.encode_response(response, 11)
    out = wire.rewrite_response(frame, ApiKey.METADATA, 8, "127.0.0.1", PORTS.__getitem__)
    correlation_id, rewritten = frames.decode_response(out, ApiKey.METADATA, 8)
    assert correlation_id == 11
    assert [(b.node_id, b.host, b.port) for b in rewritten.brokers] == [
        (b, "127.0.0.1", PORTS[b]) for b in range(3)]
    assert rewritten.topics == response.topics


def test_find_coordinator_rewritten_unless_an_error():
    m = frames.response_module(ApiKey.FIND_COORDINATOR, 2)
    found = m.FindCoordinatorResponse(throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                                      error_message=None, node_id=2, host="/shm", port=2)
    out = wire.rewrite_response(frames.encode_response(found, 1), ApiKey.FIND_COORDINATOR, 2,
                                "127.0.0.1", PORTS.__getitem__)
    _, rewritten = frames.decode_response(out, ApiKey.FIND_COORDINATOR, 2)
    assert (rewritten.node_id, rewritten.host, rewritten.port) == (2, "127.0.0.1", 9094)
    missing = m.FindCoordinatorResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.coordinator_not_available,
        error_message=None, node_id=-1, host="", port=-1)
    out = wire.rewrite_response(frames.encode_response(missing, 1), ApiKey.FIND_COORDINATOR,
                                2, "127.0.0.1", PORTS.__getitem__)
    assert frames.decode_response(out, ApiKey.FIND_COORDINATOR, 2)[1] == missing


def test_api_versions_v3_gets_the_local_apis_with_header_v0():
    broker = frames.api_versions_response(3)
    out = wire.rewrite_response(frames.encode_response(broker, 3), ApiKey.API_VERSIONS, 3,
                                "127.0.0.1", PORTS.__getitem__)
    (size, correlation_id, error) = struct.unpack_from(">iih", out)  # no tagged byte
    assert (size, correlation_id, error) == (len(out) - 4, 3, 0)
    _, response = frames.decode_response(out, ApiKey.API_VERSIONS, 3)
    keys = {e.api_key: (e.min_version, e.max_version) for e in response.api_keys}
    assert keys == {**{int(k): v for k, v in frames.SUPPORTED_VERSIONS.items()},
                    **wire.LOCAL_VERSIONS}
    assert [e.api_key for e in response.api_keys] == sorted(keys)


@pytest.mark.parametrize("request_version,error", [
    (4, ErrorCode.unsupported_version), (3, ErrorCode.invalid_request)])
def test_api_versions_errors_pass_unchanged(request_version, error):
    """UNSUPPORTED_VERSION (read as v0) and INVALID_REQUEST carry nothing to add."""
    answered = wire.answered_version(ApiKey.API_VERSIONS, request_version)
    assert answered == (0 if request_version > 3 else 3)
    m = frames.response_module(ApiKey.API_VERSIONS, answered)
    keys = (m.ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=0, max_version=3),) if (
        error == ErrorCode.unsupported_version) else ()
    fields = {"throttle_time": NO_THROTTLE} if answered else {}
    broker = frames.encode_response(
        m.ApiVersionsResponse(error_code=error, api_keys=keys, **fields), 3)
    out = wire.rewrite_response(broker, ApiKey.API_VERSIONS, request_version, "127.0.0.1",
                                PORTS.__getitem__)
    assert bytes(out) == bytes(broker)


def local_request(api_key, version, body, flexible):
    client = b"c"
    header = struct.pack(">hhih", api_key, version, 9, len(client)) + client
    payload = header + (b"\x00" if flexible else b"") + body
    return struct.pack(">i", len(payload)) + payload


def test_acl_apis_answer_security_disabled():
    # DescribeAcls v1: resource type filter, name, pattern, principal, host, operation,
    # permission (nullable strings null)
    body = struct.pack(">bhbhhbb", 1, -1, 1, -1, -1, 1, 1)
    frame = local_request(wire.DESCRIBE_ACLS, 1, body, flexible=False)
    out = wire.local_response(frame, wire.DESCRIBE_ACLS, 1, 9, "127.0.0.1", PORTS.get, None)
    (correlation_id, _throttle, error) = struct.unpack_from(">iih", out, 4)
    assert (correlation_id, error) == (9, 54)  # SECURITY_DISABLED
    assert wire.NO_AUTHORIZER.encode() in out
    with pytest.raises(InvalidRequestError, match="does not parse"):
        wire.local_response(frame[:-3], wire.DESCRIBE_ACLS, 1, 9, "h", PORTS.get, None)
    with pytest.raises(InvalidRequestError, match="outside the served 1..3"):
        wire.local_response(frame, wire.DESCRIBE_ACLS, 0, 9, "h", PORTS.get, None)


def test_describe_cluster_lists_live_brokers_at_gateway_addresses():
    image = MetadataImage(version=3, cluster_id="cid", controller_id=1, brokers={
        0: BrokerInfo(0, 10, True), 1: BrokerInfo(1, 11, True), 2: BrokerInfo(2, 12, False)},
        topics={})
    frame = local_request(wire.DESCRIBE_CLUSTER, 0, b"\x00\x00", flexible=True)
    out = wire.local_response(frame, wire.DESCRIBE_CLUSTER, 0, 9, "127.0.0.1",
                              PORTS.__getitem__, image)
    assert out[8] == 0  # response header v1: no tagged fields
    assert b"cid" in out and out.count(b"127.0.0.1") == 2


def test_config_kafka_names_and_bad_values():
    config = GatewayConfig.from_overrides({"queued.max.requests": "7"})
    assert config.queued_max_requests == 7
    assert config.socket_request_max_bytes == 104857600
    with pytest.raises(InvalidConfigurationError, match="unknown gateway config 'nope'"):
        GatewayConfig.from_overrides({"nope": "1"})
    with pytest.raises(InvalidConfigurationError, match="must be an integer, found 'x'"):
        GatewayConfig.from_overrides({"connections.max.idle.ms": "x"})
    with pytest.raises(InvalidConfigurationError, match="at least 1, found 0"):
        GatewayConfig.from_overrides({"queued.max.requests": "0"})
    with pytest.raises(InvalidConfigurationError, match="power of two"):
        GatewayConfig.from_overrides({"ringlog.ring.bytes": "100000"})
    assert config.socket_receive_buffer_bytes == config.socket_send_buffer_bytes == 102400
    assert GatewayConfig.from_overrides(
        {"socket.send.buffer.bytes": "-1"}).socket_send_buffer_bytes == -1  # the OS's
    with pytest.raises(InvalidConfigurationError, match="or -1 for the OS default, found 0"):
        GatewayConfig.from_overrides({"socket.receive.buffer.bytes": "0"})
