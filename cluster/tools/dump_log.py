"""``ringlog dump-log``: ``segments.dump`` (kafka-dump-log) plus ``--offsets-decoder``.

With ``--offsets-decoder`` (which implies ``--print-data-log``, as Kafka's does) every
record of a ``__consumer_offsets`` segment is printed as Kafka 3.x's
``OffsetsMessageParser`` prints it: ``key: {"type":"<key version>","data":{...}}`` and
``payload: {"version":"<value version>","data":{...}}`` — compact JSON with Kafka's field
names, only the fields the record's version has — or ``payload: <DELETE>`` for a
tombstone. A consumer group's members' ``subscription`` and ``assignment`` are decoded as
ConsumerProtocolSubscription / ConsumerProtocolAssignment JSON (bytes that do not parse
stay base64, as Kafka keeps them); other bytes are base64. A key of an unknown type prints
``unknown::version=<type>`` / ``unknown``; a record without a key, or whose bytes do not
parse, prints the reason in place of the key.

The parsing is ``replica_proc.group_coordinator.records``'; the printing ``segments.dump``'s.

Pure code, run by the CLI's process.
"""
from __future__ import annotations

import base64
import dataclasses
import importlib
import json
import struct

from kio.serial import entity_reader

from replica_proc.group_coordinator import records
from segments import dump

_VERSION = struct.Struct(">h")
_CONSUMER = "consumer"
_CONSUMER_STRUCTS = {  # field -> (kio schema package, class)
    "subscription": ("consumer_protocol_subscription", "ConsumerProtocolSubscription"),
    "assignment": ("consumer_protocol_assignment", "ConsumerProtocolAssignment"),
}


def add_arguments(parser):
    dump.add_arguments(parser)
    parser.add_argument(
        "--offsets-decoder", action="store_true",
        help="decode the records of __consumer_offsets segments (implies --print-data-log)")
    return parser


def run(args, out=None):
    if not args.offsets_decoder:
        return dump.run(args, out)
    args.print_data_log = True
    return dump.run(args, out, parse_record=parse_offsets_record)


def parse_offsets_record(record):
    """``(key text, payload text)`` of a ``__consumer_offsets`` record (module doc)."""
    if record.key is None:
        return (f"Failed to decode message at offset {record.offset} using offset topic "
                f"decoder (message had a missing key)", None)
    key_bytes = bytes(record.key)
    try:
        (key_version,) = _VERSION.unpack_from(key_bytes)
        if key_version not in records.OFFSET_COMMIT_KEY_TYPES + (
                records.GROUP_METADATA_KEY_TYPE,):
            return f"unknown::version={key_version}", "unknown"
        key = records.decode_key(key_bytes)
        key_text = _compact({"type": str(key_version), "data": dataclasses.asdict(key)})
        if record.value is None:
            return key_text, "<DELETE>"
        value_bytes = bytes(record.value)
        value = records.decode_value(key, value_bytes)
    except (ValueError, struct.error) as exc:
        return f"cannot decode: {exc}", None
    (version,) = _VERSION.unpack_from(value_bytes)
    data = (_offset_commit_value(value, version)
            if isinstance(value, records.OffsetCommitValue)
            else _group_metadata_value(value, version))
    return key_text, _compact({"version": str(version), "data": data})


def _compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _offset_commit_value(value, version):
    data = {"offset": value.offset}
    if version >= 3:
        data["leaderEpoch"] = value.leader_epoch
    data["metadata"] = value.metadata
    data["commitTimestamp"] = value.commit_timestamp
    if version == 1:
        data["expireTimestamp"] = value.expire_timestamp
    return data


def _group_metadata_value(value, version):
    data = {"protocolType": value.protocol_type, "generation": value.generation,
            "protocol": value.protocol, "leader": value.leader}
    if version >= 2:
        data["currentStateTimestamp"] = value.current_state_timestamp
    data["members"] = [_member(m, version, value.protocol_type == _CONSUMER)
                       for m in value.members]
    return data


def _member(member, version, consumer):
    data = {"memberId": member.member_id}
    if version >= 3:
        data["groupInstanceId"] = member.group_instance_id
    data["clientId"] = member.client_id
    data["clientHost"] = member.client_host
    if version >= 1:
        data["rebalanceTimeout"] = member.rebalance_timeout
    data["sessionTimeout"] = member.session_timeout
    for field in ("subscription", "assignment"):
        raw = getattr(member, field)
        data[field] = _consumer_struct(field, raw) if consumer else _base64(raw)
    return data


def _consumer_struct(field, raw):
    """The consumer protocol struct in ``raw`` as JSON (base64 if it does not parse)."""
    package, name = _CONSUMER_STRUCTS[field]
    try:
        (version,) = _VERSION.unpack_from(raw)
        module = importlib.import_module(f"kio.schema.{package}.v{min(version, 3)}.data")
        body, _ = entity_reader(getattr(module, name))(memoryview(raw), _VERSION.size)
    except Exception:  # Kafka swallows any failure here and keeps the bytes
        return _base64(raw)
    return _json(body)


def _json(obj):
    if dataclasses.is_dataclass(obj):
        return {_camel(f.name): _json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return [_json(item) for item in obj]
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return _base64(obj)
    return obj


def _camel(name):
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


def _base64(data):
    return None if data is None else base64.b64encode(bytes(data)).decode("ascii")
