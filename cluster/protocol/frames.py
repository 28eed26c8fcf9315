"""Kafka protocol frames on the rings: the supported APIs and versions, and their codec.

The rings carry real Kafka frames at non-flexible versions (layout: ``frame_descriptor``),
so a TCP gateway can shuttle frames between Kafka clients and the rings unchanged. An API
that has no non-flexible version (AlterPartition, KIP-497; AllocateProducerIds, KIP-730;
WriteTxnMarkers in kio; the transaction tools' APIs of KIP-664) is carried at its flexible
versions instead, with request header v2 and response header v1: the v1 / v0 headers
followed by an empty tagged-field section (``FLEXIBLE_ONLY``). So are the flexible versions
that add fields no non-flexible version has (``FLEXIBLE_FROM``: KIP-447's TxnOffsetCommit
v3 and OffsetFetch v7; ApiVersions v3, KIP-511's client software name and version). Every
other API keeps its non-flexible versions only. ApiVersions' responses keep response header
v0 at every version, as Kafka's do (a client reads them before it knows the broker's
versions): the header each body goes with is kio's ``__header_schema__``. Request and
response bodies are kio's dataclasses (``kio.schema.<api>.v<N>``, but for
``_SCHEMA_OVERRIDES``; ``request_module`` / ``response_module`` give the module holding a
version's nested classes); the header is written and parsed here. Record batches travel as
opaque bytes, never parsed: the ProduceRequest that carries them (and the FetchRequest a
consumer sends for each response) is encoded by ``batch_bodies`` straight into the
destination buffer, the records copied once; the broker writes its FetchResponse in place
from the log (``fetch_response``), and other FetchResponse objects (fakes in tests) are
encoded by kio. Decoding is kio's native reader, which hands ``records`` back as ``bytes``
(one copy, made at memcpy speed, so the ring slot can be released at once) — but for a
Produce request of VIEW_RECORDS_FROM bytes or more, whose records ``decode_request`` hands
back as read-only views of the frame (``batch_bodies.read_produce_request``): the broker
appends them straight from its request ring, and must drop them before it releases it.

Encoding::

    frame = encode_request(request, correlation_id, client_id)         # a bytearray
    size = request_frame_size(request, client_id)                      # or, into a slot:
    end = encode_request_into(slot, 0, request, correlation_id, client_id)

``request_frame_size`` and ``encode_request_into`` cost one pass each for Produce and
Fetch requests; for the other APIs each encodes the body, so prefer ``encode_request`` for
them.

Decoding a request (broker side) raises only ``InvalidRequestError`` (INVALID_REQUEST, 42)
for bytes that are not a frame of a supported API, or ``UnsupportedVersionError``
(UNSUPPORTED_VERSION, 35) for a well-formed header naming an API key or version outside
``SUPPORTED_VERSIONS``; both carry ``header`` (the parsed kio ``RequestHeader``, or
``None`` if even the header did not parse), so a broker can answer ApiVersions with
UNSUPPORTED_VERSION as Kafka does, and drop the connection otherwise. Decoding a response
(client side) raises ``KafkaProtocolError`` for garbage. Asking for an API or version this
module does not support raises ``UnsupportedVersionError``; encoding a field value the wire
type cannot hold raises ``IllegalArgumentError``. Pure functions: any thread.
"""
from __future__ import annotations

import datetime
import enum
import importlib
import io
import struct
from typing import NamedTuple

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from cluster.errors import (
    IllegalArgumentError,
    InvalidRequestError,
    KafkaProtocolError,
    UnsupportedVersionError,
)
from cluster.protocol import (
    batch_bodies as records,
    describe_transactions_schema,
    frame_descriptor as d,
)


class ApiKey(enum.IntEnum):
    """Kafka's API keys, for the APIs ringlog serves."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    ALTER_PARTITION = 56
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67


class ElectionType(enum.IntEnum):
    """ElectLeaders' ``election_type`` (KIP-460; v0 requests are PREFERRED): Kafka's
    ``ElectionType``, kafka-python's ``ElectionType``."""

    PREFERRED = 0
    UNCLEAN = 1


#: api_key -> (min version, max version): what a broker advertises in ApiVersions. Every
#: version in range is present in kio and non-flexible (request header v1, response header
#: v0), except for the APIs of ``FLEXIBLE_ONLY`` and the versions of ``FLEXIBLE_FROM``;
#: the lowest are those Kafka 4.0 still accepts (KIP-896).
SUPPORTED_VERSIONS = {
    ApiKey.PRODUCE: (3, 8),
    ApiKey.FETCH: (4, 11),
    ApiKey.LIST_OFFSETS: (1, 5),
    ApiKey.METADATA: (1, 8),
    ApiKey.OFFSET_COMMIT: (2, 7),
    ApiKey.OFFSET_FETCH: (1, 7),  # v6+ flexible (FLEXIBLE_FROM); v8+ batch groups
    ApiKey.FIND_COORDINATOR: (0, 2),
    ApiKey.JOIN_GROUP: (2, 5),
    ApiKey.HEARTBEAT: (1, 3),
    ApiKey.LEAVE_GROUP: (1, 3),
    ApiKey.SYNC_GROUP: (1, 3),
    ApiKey.DESCRIBE_GROUPS: (0, 4),  # v5+ are flexible
    ApiKey.LIST_GROUPS: (0, 2),  # v3+ are flexible (v4 adds the states filter)
    ApiKey.API_VERSIONS: (0, 3),  # v3 flexible (FLEXIBLE_FROM); v4 left out
    ApiKey.CREATE_TOPICS: (2, 4),
    ApiKey.DELETE_TOPICS: (1, 3),
    ApiKey.DELETE_RECORDS: (0, 1),
    ApiKey.INIT_PRODUCER_ID: (0, 1),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 3),  # v0-1 are in neither kio nor Kafka 4.0
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 2),  # v3+ are flexible (v4+: between brokers)
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 2),  # v3+ are flexible
    ApiKey.END_TXN: (0, 2),  # v3+ are flexible
    ApiKey.WRITE_TXN_MARKERS: (1, 1),  # flexible only: kio has no v0 (see FLEXIBLE_ONLY)
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),  # v3 flexible (FLEXIBLE_FROM)
    ApiKey.DESCRIBE_CONFIGS: (1, 3),
    ApiKey.ALTER_CONFIGS: (0, 1),
    ApiKey.CREATE_PARTITIONS: (0, 1),
    ApiKey.DELETE_GROUPS: (0, 1),  # v2+ are flexible
    ApiKey.ELECT_LEADERS: (0, 1),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 0),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.ALTER_PARTITION: (2, 3),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),  # v2 (KIP-1152's transactional id pattern) left out
    ApiKey.ALLOCATE_PRODUCER_IDS: (0, 0),
}

#: The APIs without a non-flexible version, carried at flexible versions (request header
#: v2, response header v1). AlterPartition v2 (topic ids) and v3 (KIP-903's broker epochs
#: per ISR member) are the versions kio has. AllocateProducerIds (KIP-730, a broker asking
#: the controller for a block of producer ids) has v0 only, flexible. WriteTxnMarkers
#: (between brokers: the transaction coordinator to partition leaders) has v0 in Kafka's
#: schema but not in kio, so it travels as v1, its flexible twin. DescribeProducers,
#: DescribeTransactions and ListTransactions (KIP-664, ``kafka-transactions.sh``) are
#: flexible from their first version.
FLEXIBLE_ONLY = frozenset({ApiKey.ALTER_PARTITION, ApiKey.ALLOCATE_PRODUCER_IDS,
                           ApiKey.WRITE_TXN_MARKERS, ApiKey.DESCRIBE_PRODUCERS,
                           ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS})

#: APIs served at non-flexible versions and, from the version named here, at flexible ones,
#: because only those carry the fields of a feature (KIP-447, exactly-once with consumer
#: groups): TxnOffsetCommit v3 adds the consumer's generation, member id and group instance
#: id; OffsetFetch v7 adds ``require_stable`` (v6 is v5 made flexible); ApiVersions v3 adds
#: the client's software name and version (KIP-511, what Kafka 2.4+ clients send first).
#: Headers as for ``FLEXIBLE_ONLY``, but ApiVersions' responses keep header v0.
FLEXIBLE_FROM = {ApiKey.TXN_OFFSET_COMMIT: 3, ApiKey.OFFSET_FETCH: 6, ApiKey.API_VERSIONS: 3}


def is_flexible(api_key, api_version):
    """Whether ``api_key`` at ``api_version`` travels flexible (request header v2, response
    header v1): an API of ``FLEXIBLE_ONLY``, or a version from ``FLEXIBLE_FROM``'s on."""
    return api_key in FLEXIBLE_ONLY or api_version >= FLEXIBLE_FROM.get(api_key, 1 << 15)

#: Bodies read with ringlog's own schema instead of kio's, by (kind, api_key, version):
#: kio reads DescribeTransactions' start time as a datetime and refuses the -1 Kafka
#: answers for a transactional id with no transaction (``describe_transactions_schema``).
_SCHEMA_OVERRIDES = {
    ("response", ApiKey.DESCRIBE_TRANSACTIONS, 0):
        describe_transactions_schema.DescribeTransactionsResponse,
}


class _Codec(NamedTuple):
    """Everything needed to encode and decode one body type at one version."""

    cls: type
    size: object  # body -> int; None: encode with kio to learn the size
    write_into: object  # (view, position, body) -> end; None: use kio_write
    kio_write: object  # (writable, body) -> None
    kio_read: object  # (buffer, offset) -> (body, bytes consumed)
    tagged: int  # bytes of the header's empty tagged-field section: 1 if flexible, else 0


#: The hand encoders, by (kind, api_key): (size, write_into).
_HAND_ENCODERS = {
    ("request", ApiKey.PRODUCE): (records.produce_request_size, records.write_produce_request),
    ("request", ApiKey.FETCH): (records.fetch_request_size, records.write_fetch_request),
}
_LOADERS = {"request": load_request_schema, "response": load_response_schema}
#: Produce request frames of at least this many bytes are decoded with their records as
#: views of the frame (module doc): above it, kio's copy of the records costs more than
#: reading the fields in Python.
VIEW_RECORDS_FROM = 256 * 1024
_CODECS = {}  # (kind, api_key, api_version) -> _Codec


def _check_supported(api_key, api_version):
    supported = SUPPORTED_VERSIONS.get(api_key)
    if supported is None:
        raise UnsupportedVersionError(
            f"api key {api_key} is not one of the supported "
            f"{sorted(map(int, SUPPORTED_VERSIONS))}")
    low, high = supported
    if not low <= api_version <= high:
        raise UnsupportedVersionError(
            f"{ApiKey(api_key).name} version {api_version} is outside the supported "
            f"{low}..{high}")


def _codec(kind, api_key, api_version):
    """The codec of ``kind`` ('request' or 'response') for a supported API and version."""
    try:
        return _CODECS[(kind, api_key, api_version)]
    except KeyError:
        pass
    _check_supported(api_key, api_version)
    cls = _SCHEMA_OVERRIDES.get((kind, api_key, api_version))
    if cls is None:
        cls = _LOADERS[kind](api_key, api_version)
    size, write_into = _HAND_ENCODERS.get((kind, api_key), (None, None))
    # the body's header: v2 / v1 for a flexible body, but v0 for ApiVersions' responses
    flexible_header = cls.__header_schema__.__flexible__
    codec = _Codec(cls, size, write_into, entity_writer(cls), entity_reader(cls),
                   d.EMPTY_TAGGED_FIELDS_LENGTH if flexible_header else 0)
    return _CODECS.setdefault((kind, api_key, api_version), codec)


def load_codecs(api_key):
    """Load the request and response codecs of ``api_key`` at its highest supported version
    (the one ringlog's clients send) now: kio imports an API's schema modules at their
    first use, tens of milliseconds for Produce and Fetch, which a process on the hot path
    pays at import (a broker's zygote before it forks) rather than at its first request."""
    version = SUPPORTED_VERSIONS[api_key][1]
    _codec("request", api_key, version)
    _codec("response", api_key, version)


def request_class(api_key, api_version):
    """kio's request class for ``api_key`` at ``api_version``."""
    return _codec("request", api_key, api_version).cls


def response_class(api_key, api_version):
    """kio's response class for ``api_key`` at ``api_version``."""
    return _codec("response", api_key, api_version).cls


def request_module(api_key, api_version):
    """The kio module of the request and its nested classes, e.g. for Produce v8 the one
    holding ``ProduceRequest``, ``TopicProduceData`` and ``PartitionProduceData``."""
    return importlib.import_module(request_class(api_key, api_version).__module__)


def response_module(api_key, api_version):
    """The kio module of the response and its nested classes."""
    return importlib.import_module(response_class(api_key, api_version).__module__)


def api_versions_response(api_version, error_code=ErrorCode.none, throttle_time_ms=0):
    """The ApiVersionsResponse of ``api_version`` advertising ``SUPPORTED_VERSIONS``.

    A broker answers an ApiVersions request of a version it does not support with version
    0 of this and ``error_code=ErrorCode.unsupported_version``, as Kafka does.
    """
    module = response_module(ApiKey.API_VERSIONS, api_version)
    cls, entry_cls = module.ApiVersionsResponse, module.ApiVersion
    fields = {
        "error_code": error_code,
        "api_keys": tuple(entry_cls(api_key=int(key), min_version=low, max_version=high)
                          for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())),
    }
    if api_version >= 1:
        fields["throttle_time"] = datetime.timedelta(milliseconds=throttle_time_ms)
    return cls(**fields)


# -- encoding ---------------------------------------------------------------------------------

def _codec_of(kind, body):
    """The codec for a kio ``body`` object, checking it is a ``kind`` ('request' or
    'response') of a supported API and version."""
    cls = type(body)
    try:
        api_key, api_version = cls.__api_key__, cls.__version__
    except AttributeError:
        raise IllegalArgumentError(f"{cls.__name__} is not a kio {kind} class") from None
    codec = _codec(kind, api_key, api_version)
    if codec.cls is not cls:
        raise IllegalArgumentError(
            f"{cls.__module__}.{cls.__name__} is not the {kind} class "
            f"{codec.cls.__module__}.{codec.cls.__name__}")
    return codec


#: What encoding a field value the wire type cannot hold raises, in kio or the hand encoders.
_UNENCODABLE = (SerialError, struct.error, TypeError, ValueError, AttributeError)


def _unencodable(body, exc):
    return IllegalArgumentError(
        f"cannot encode {type(body).__name__} v{body.__version__}: {exc}")


def _kio_body(codec, body):
    out = io.BytesIO()
    try:
        codec.kio_write(out, body)
    except _UNENCODABLE as exc:
        raise _unencodable(body, exc) from exc
    return out.getvalue()


def _body_size(codec, body):
    if codec.size is None:
        return len(_kio_body(codec, body))
    try:
        return codec.size(body)
    except _UNENCODABLE as exc:
        raise _unencodable(body, exc) from exc


def _write_body(codec, view, position, body):
    """Write ``body`` at ``position`` in the memoryview ``view``; returns the end position."""
    if codec.write_into is None:
        data = _kio_body(codec, body)
        end = position + len(data)
        view[position:end] = data
        return end
    try:
        return codec.write_into(view, position, body)
    except _UNENCODABLE as exc:
        raise _unencodable(body, exc) from exc


def _client_id_bytes(client_id):
    if client_id is None:
        return b""
    data = client_id.encode()
    if len(data) > 0x7FFF:
        raise IllegalArgumentError(
            f"client_id of {len(data)} bytes exceeds the 32767 a header can carry")
    return data


def _check_room(buf, position, size):
    if position < 0 or len(buf) - position < size:
        raise IllegalArgumentError(
            f"a frame of {size} bytes does not fit at position {position} of a "
            f"{len(buf)}-byte buffer")


def request_frame_size(request, client_id):
    """Bytes the frame of ``request`` occupies, size prefix included."""
    codec = _codec_of("request", request)
    return (d.CLIENT_ID_OFFSET + len(_client_id_bytes(client_id)) + codec.tagged
            + _body_size(codec, request))


def encode_request_into(buf, position, request, correlation_id, client_id):
    """Write the frame of ``request`` at ``position`` in the writable ``buf``; returns the
    end position. ``buf`` must have ``request_frame_size(...)`` bytes from ``position``; if
    this raises, the bytes there are undefined (do not commit the slot)."""
    codec = _codec_of("request", request)
    client = _client_id_bytes(client_id)
    header_size = d.CLIENT_ID_OFFSET + len(client) + codec.tagged
    size = header_size + _body_size(codec, request)
    _check_room(buf, position, size)
    with memoryview(buf) as view:
        _write_request_header(view, position, size, request, correlation_id, client_id, client,
                              codec.tagged)
        end = _write_body(codec, view, position + header_size, request)
    assert end == position + size, (end, position, size)
    return end


MAX_CORRELATION_ID = 2**31 - 1
"""The largest correlation id: the request header's field is an int32."""


def next_correlation_id(previous):
    """The correlation id after ``previous``: one more, wrapping to 0 after
    MAX_CORRELATION_ID (as kafka-python's ``(id + 1) % 2**31``), so a long-lived client
    never builds a header its int32 cannot hold. Every request client's counter steps
    through this."""
    return (previous + 1) & MAX_CORRELATION_ID


def encode_request(request, correlation_id, client_id):
    """The frame of ``request`` (a kio request object) as a ``bytearray``."""
    codec = _codec_of("request", request)
    client = _client_id_bytes(client_id)
    header_size = d.CLIENT_ID_OFFSET + len(client) + codec.tagged
    body = _kio_body(codec, request) if codec.write_into is None else None
    frame = bytearray(header_size + (len(body) if body is not None
                                     else _body_size(codec, request)))
    with memoryview(frame) as view:
        if body is not None:
            view[header_size:] = body
        else:
            _write_body(codec, view, header_size, request)
        _write_request_header(view, 0, len(frame), request, correlation_id, client_id, client,
                              codec.tagged)
    return frame


def _write_request_header(buf, position, size, request, correlation_id, client_id, client,
                          tagged):
    """Request header v1, or v2 with ``tagged`` (1) bytes of empty tagged fields."""
    try:
        d.REQUEST_PREFIX.pack_into(
            buf, position, size - d.SIZE_PREFIX_LENGTH, request.__api_key__,
            request.__version__, correlation_id,
            d.NULL_LENGTH if client_id is None else len(client))
    except struct.error as exc:
        raise IllegalArgumentError(f"correlation_id {correlation_id!r}: {exc}") from exc
    start = position + d.CLIENT_ID_OFFSET
    buf[start:start + len(client)] = client
    if tagged:
        buf[start + len(client)] = d.NO_TAGGED_FIELDS


def encode_response(response, correlation_id):
    """The frame of ``response`` (a kio response object) as a ``bytearray``; the body is
    kio's (the broker writes its Fetch responses in place: ``fetch_response``). Response
    header v1 (an empty tagged-field section after the correlation id) for a flexible
    response, else v0; ApiVersions' always v0."""
    codec = _codec_of("response", response)
    body = _kio_body(codec, response)
    start = d.RESPONSE_BODY_OFFSET + codec.tagged
    frame = bytearray(start + len(body))
    with memoryview(frame) as view:
        view[start:] = body
        _write_response_header(view, 0, len(frame), correlation_id)
    if codec.tagged:
        frame[d.RESPONSE_BODY_OFFSET] = d.NO_TAGGED_FIELDS
    return frame


def _write_response_header(buf, position, size, correlation_id):
    try:
        d.RESPONSE_PREFIX.pack_into(buf, position, size - d.SIZE_PREFIX_LENGTH, correlation_id)
    except struct.error as exc:
        raise IllegalArgumentError(f"correlation_id {correlation_id!r}: {exc}") from exc


# -- decoding ---------------------------------------------------------------------------------

#: What kio's reader raises on bytes that do not parse (ValueError: an unknown error code
#: or enum value; KeyError: a tag a flexible body does not define); the fuzz test holds it
#: to that.
_MALFORMED = (SerialError, ValueError, KeyError)


def _frame_view(frame, minimum, error):
    """A read-only memoryview of ``frame`` (bytes-like) once its length agrees with the size
    prefix. Read-only because kio's reader refuses writable buffers, such as a ring slot."""
    view = memoryview(frame).toreadonly()
    if len(view) < minimum:
        raise error(f"frame of {len(view)} bytes is shorter than the {minimum}-byte header")
    (size,) = d.INT32.unpack_from(view, d.SIZE_OFFSET)
    if size != len(view) - d.SIZE_PREFIX_LENGTH:
        raise error(f"size prefix says {size} bytes follow, the frame has "
                    f"{len(view) - d.SIZE_PREFIX_LENGTH}")
    return view


def _read_body(codec, view, position):
    """The body at ``position`` that must run exactly to the end of ``view``."""
    body, consumed = codec.kio_read(view, position)
    if position + consumed != len(view):
        raise ValueError(f"body ends at position {position + consumed}, "
                         f"{len(view) - position - consumed} bytes of {len(view)} left over")
    return body


_read_request_header = entity_reader(RequestHeader)


def _read_uvarint(view, position):
    """(value, end) of the unsigned varint at ``position``."""
    value = shift = 0
    while True:
        if position >= len(view) or shift > 28:
            raise ValueError(f"unsigned varint at position {position} does not end")
        byte = view[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7


def skip_tagged_fields(view, position):
    """The end of the tagged-field section at ``position``; the fields (none is defined
    for the headers) are ignored, as Kafka ignores tags it does not know."""
    count, position = _read_uvarint(view, position)
    for _ in range(count):
        _, position = _read_uvarint(view, position)
        size, position = _read_uvarint(view, position)
        position += size
    if position > len(view):
        raise ValueError(f"tagged fields run {position - len(view)} bytes past the frame")
    return position


def decode_request(frame):
    """``(RequestHeader, request)`` from ``frame``: one whole request frame (bytes-like,
    size prefix included, nothing after it); a large Produce request's records are views
    of ``frame`` (module doc). The header is kio's ``RequestHeader`` v1
    (``request_api_key``, ``request_api_version``, ``correlation_id``, ``client_id``), for
    a flexible request too (its v2 header's tagged fields are read past: none is defined)."""
    view = _frame_view(frame, d.MIN_REQUEST_FRAME_LENGTH, InvalidRequestError)
    try:
        header, header_size = _read_request_header(view, d.SIZE_PREFIX_LENGTH)
    except _MALFORMED as exc:
        raise InvalidRequestError(f"request header does not parse: {exc}") from None
    api_key, api_version = header.request_api_key, header.request_api_version
    try:
        codec = _codec("request", api_key, api_version)
    except UnsupportedVersionError as exc:
        exc.header = header
        raise
    try:
        start = d.SIZE_PREFIX_LENGTH + header_size
        if codec.tagged:
            start = skip_tagged_fields(view, start)
        if api_key == ApiKey.PRODUCE and len(view) >= VIEW_RECORDS_FROM:
            request, end = records.read_produce_request(
                view, start, request_module(api_key, api_version))
            if end != len(view):
                raise ValueError(f"body ends at position {end}, {len(view) - end} bytes of"
                                 f" {len(view)} left over")
        else:
            request = _read_body(codec, view, start)
    except _MALFORMED as exc:
        error = InvalidRequestError(
            f"{ApiKey(api_key).name} v{api_version} request (correlation_id "
            f"{header.correlation_id}) does not parse: {exc}")
        error.header = header
        raise error from None
    return header, request


def response_correlation_id(frame):
    """The correlation id of a response frame, to find the request it answers."""
    view = _frame_view(frame, d.MIN_RESPONSE_FRAME_LENGTH, KafkaProtocolError)
    (correlation_id,) = d.INT32.unpack_from(view, d.RESPONSE_CORRELATION_ID_OFFSET)
    return correlation_id


def decode_response(frame, api_key, api_version):
    """``(correlation_id, response)`` from ``frame``: one whole response frame, the answer
    to a request of ``api_key`` at ``api_version``."""
    codec = _codec("response", api_key, api_version)
    view = _frame_view(frame, d.MIN_RESPONSE_FRAME_LENGTH, KafkaProtocolError)
    (correlation_id,) = d.INT32.unpack_from(view, d.RESPONSE_CORRELATION_ID_OFFSET)
    try:
        start = d.RESPONSE_BODY_OFFSET
        if codec.tagged:
            start = skip_tagged_fields(view, start)
        response = _read_body(codec, view, start)
    except _MALFORMED as exc:
        raise KafkaProtocolError(
            f"{ApiKey(api_key).name} v{api_version} response (correlation_id "
            f"{correlation_id}) does not parse: {exc}") from None
    return correlation_id, response

