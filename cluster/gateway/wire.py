"""What the gateway reads and writes in the Kafka frames it shuttles.

Frames pass between a TCP client and a broker's rings as they are; the gateway looks only
at a request's header (``peek_request``: api key, version, correlation id) and, for
Produce, at ``acks`` (``expects_response``: acks=0 gets no answer, as in Kafka). Three
kinds of frame are changed or made here:

- **Addresses** (``rewrite_response``): a broker describes itself as its shared-memory
  listener (host) and its id (port); Metadata's ``brokers`` and FindCoordinator's
  coordinator are rewritten to the gateway's ``host`` and the TCP port it listens on for
  that broker (``ports(node_id)``), re-encoded at the version the client asked for.
- **ApiVersions**: the broker's answer, with the APIs the gateway serves itself
  (``LOCAL_VERSIONS``) added, so clients see exactly what they can use. The broker serves
  v0-v3 (v3: KIP-511's flexible version, request header v2, response header v0, as Kafka
  2.4+ answers librdkafka's and the Java client's first request); a request newer than that
  is answered with the v0 body, UNSUPPORTED_VERSION and ApiVersions' own range (Kafka's
  rule), which is why ``rewrite_response`` reads it as v0. An answer with an error
  (UNSUPPORTED_VERSION; INVALID_REQUEST for a bad client software name or version) is
  passed on as it is: nothing is added to it.
- **Served here** (``local_response``): DescribeCluster (from the metadata page) and the
  ACL APIs, answered SECURITY_DISABLED as a Kafka broker without an authorizer answers.

Pure functions over bytes and kio objects: any thread.
"""
from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import struct

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from cluster.errors import InvalidRequestError
from cluster.protocol import frame_descriptor as d, frames
from cluster.protocol.frames import ApiKey

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_CLUSTER = 60

#: The APIs the gateway answers itself: api key -> (min, max) version. The ACL APIs from
#: v1 (Kafka 4.0 dropped v0, KIP-896); DescribeCluster v0-1 (v2 adds fenced brokers).
LOCAL_VERSIONS = {
    DESCRIBE_ACLS: (1, 3),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
    DESCRIBE_CLUSTER: (0, 1),
}

#: Kafka's message when no authorizer is configured (AclApis / KafkaApis).
NO_AUTHORIZER = "No Authorizer is configured on the broker"

#: Responses whose fields carry broker addresses, or that the gateway completes.
REWRITTEN = frozenset({ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.API_VERSIONS})

_HEADER = struct.Struct(">hhi")  # api_key, api_version, correlation_id (after the size)
_ACKS = struct.Struct(">h")


def peek_request(frame):
    """``(api_key, api_version, correlation_id)`` of a request frame (size prefix
    included); InvalidRequestError if it is shorter than a request header."""
    if len(frame) < d.MIN_REQUEST_FRAME_LENGTH:
        raise InvalidRequestError(
            f"request of {len(frame) - d.SIZE_PREFIX_LENGTH} bytes is shorter than a "
            f"request header ({d.MIN_REQUEST_FRAME_LENGTH - d.SIZE_PREFIX_LENGTH} bytes)")
    return _HEADER.unpack_from(frame, d.API_KEY_OFFSET)


def _client_id_end(frame):
    (length,) = d.INT16.unpack_from(frame, d.CLIENT_ID_LENGTH_OFFSET)
    return d.CLIENT_ID_OFFSET + max(length, 0)


def expects_response(frame, api_key):
    """False for a Produce request with acks=0 (Kafka sends no response), else True. A
    Produce frame too short to hold acks is left to the broker (it closes the
    connection)."""
    if api_key != ApiKey.PRODUCE:
        return True
    try:
        position = _client_id_end(frame)
        (length,) = d.INT16.unpack_from(frame, position)  # transactional_id
        (acks,) = _ACKS.unpack_from(frame, position + 2 + max(length, 0))
    except struct.error:
        return True
    return acks != 0


# -- responses from the brokers ------------------------------------------------------------

def answered_version(api_key, api_version):
    """The version of the response a broker sends to a request of ``api_version``: the
    same, except ApiVersions newer than served, answered at v0 (UNSUPPORTED_VERSION)."""
    if api_key == ApiKey.API_VERSIONS:
        low, high = frames.SUPPORTED_VERSIONS[ApiKey.API_VERSIONS]
        if not low <= api_version <= high:
            return 0
    return api_version


def rewrite_response(frame, api_key, api_version, host, ports):
    """The response frame ``frame`` (to a request of ``api_key`` at ``api_version``) with
    its broker addresses replaced by ``host`` and ``ports(node_id)``, or ApiVersions with
    ``LOCAL_VERSIONS`` added (unless it carries an error: then ``frame`` itself).
    KafkaProtocolError if the broker's frame does not parse."""
    version = answered_version(api_key, api_version)
    correlation_id, response = frames.decode_response(frame, api_key, version)
    if api_key == ApiKey.METADATA:
        response = dataclasses.replace(response, brokers=tuple(
            dataclasses.replace(b, host=host, port=ports(b.node_id))
            for b in response.brokers))
    elif api_key == ApiKey.FIND_COORDINATOR:
        if response.node_id >= 0:
            response = dataclasses.replace(response, host=host,
                                           port=ports(response.node_id))
    elif api_key == ApiKey.API_VERSIONS:
        if response.error_code != ErrorCode.none:
            return frame  # UNSUPPORTED_VERSION or INVALID_REQUEST: nothing to add
        entry = type(response.api_keys[0]) if response.api_keys else None
        if entry is not None:
            extra = tuple(entry(api_key=key, min_version=low, max_version=high)
                          for key, (low, high) in sorted(LOCAL_VERSIONS.items()))
            keys = sorted(response.api_keys + extra, key=lambda e: e.api_key)
            response = dataclasses.replace(response, api_keys=tuple(keys))
    return frames.encode_response(response, correlation_id)


# -- served by the gateway ----------------------------------------------------------------

def _encode(response, correlation_id):
    """A response frame of a kio ``response`` the frames module does not serve: header v1
    (an empty tagged-field section) for a flexible body, else v0."""
    out = io.BytesIO()
    entity_writer(type(response))(out, response)
    body = out.getvalue()
    tagged = d.EMPTY_TAGGED_FIELDS_LENGTH if response.__flexible__ else 0
    frame = bytearray(d.RESPONSE_BODY_OFFSET + tagged + len(body))
    d.RESPONSE_PREFIX.pack_into(frame, 0, len(frame) - d.SIZE_PREFIX_LENGTH, correlation_id)
    frame[d.RESPONSE_BODY_OFFSET + tagged:] = body
    return frame


def _decode_local_request(frame, api_key, api_version):
    cls = load_request_schema(api_key, api_version)
    view = memoryview(frame).toreadonly()
    try:
        position = _client_id_end(view)
        if cls.__flexible__:
            position = frames.skip_tagged_fields(view, position)
        request, _ = entity_reader(cls)(view, position)
    except (SerialError, ValueError, KeyError, struct.error) as exc:
        raise InvalidRequestError(
            f"api key {api_key} v{api_version} request does not parse: {exc}") from None
    return request


def local_response(frame, api_key, api_version, correlation_id, host, ports, image):
    """The response frame to a request of an API in ``LOCAL_VERSIONS``; ``image`` is the
    controller's newest MetadataImage (DescribeCluster lists its live brokers).
    InvalidRequestError for a version outside ``LOCAL_VERSIONS`` or a body that does not
    parse (the connection is closed, as Kafka closes it)."""
    low, high = LOCAL_VERSIONS[api_key]
    if not low <= api_version <= high:
        raise InvalidRequestError(
            f"api key {api_key} version {api_version} is outside the served {low}..{high}")
    request = _decode_local_request(frame, api_key, api_version)
    cls = load_response_schema(api_key, api_version)
    module = importlib.import_module(cls.__module__)
    no_throttle = datetime.timedelta(0)
    disabled = ErrorCode.security_disabled
    if api_key == DESCRIBE_ACLS:
        response = cls(throttle_time=no_throttle, error_code=disabled,
                       error_message=NO_AUTHORIZER, resources=())
    elif api_key == CREATE_ACLS:
        response = cls(throttle_time=no_throttle, results=tuple(
            module.AclCreationResult(error_code=disabled, error_message=NO_AUTHORIZER)
            for _ in request.creations))
    elif api_key == DELETE_ACLS:
        response = cls(throttle_time=no_throttle, filter_results=tuple(
            module.DeleteAclsFilterResult(error_code=disabled, error_message=NO_AUTHORIZER,
                                          matching_acls=())
            for _ in request.filters))
    else:
        brokers = tuple(module.DescribeClusterBroker(broker_id=b, host=host, port=ports(b))
                        for b in image.live_brokers())
        response = cls(throttle_time=no_throttle, error_code=ErrorCode.none,
                       cluster_id=image.cluster_id, controller_id=image.controller_id,
                       brokers=brokers)
    return _encode(response, correlation_id)
