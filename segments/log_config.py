"""Per-partition log configuration, with Kafka's topic-level names and defaults.

``LogConfig.from_dict({"segment.bytes": 1 << 20, "cleanup.policy": "compact"})`` builds one
from Kafka's names; values may be ints or the strings a config file holds (``"1048576"``).
A bad key or value raises ``InvalidLogConfigError`` naming the key, the value found and
what was expected. The object is immutable; a config change makes a new one
(``config.updated({...})``) that the log's owner hands to ``PartitionLog.update_config``.
"""
from __future__ import annotations

import dataclasses
import functools

from segments.errors import InvalidLogConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

CLEANUP_POLICY_DELETE = "delete"
CLEANUP_POLICY_COMPACT = "compact"

TIMESTAMP_TYPE_CREATE_TIME = "CreateTime"
TIMESTAMP_TYPE_LOG_APPEND_TIME = "LogAppendTime"


@dataclasses.dataclass(frozen=True)
class _Key:
    """One configuration key: Kafka's name, the attribute, default, minimum, maximum."""

    name: str
    attribute: str
    default: object
    minimum: int = None
    maximum: int = None


_INT_KEYS = (
    # segment.bytes: Kafka's lower bound is the smallest legacy record (14 bytes); the
    # upper bound keeps positions in an int32, as the offset index stores them.
    _Key("segment.bytes", "segment_bytes", 1024 * 1024 * 1024, 14, INT_MAX),
    _Key("segment.ms", "segment_ms", 7 * 24 * 3600 * 1000, 1, LONG_MAX),
    _Key("segment.index.bytes", "segment_index_bytes", 10 * 1024 * 1024, 12, INT_MAX),
    _Key("index.interval.bytes", "index_interval_bytes", 4096, 0, INT_MAX),
    _Key("retention.ms", "retention_ms", 7 * 24 * 3600 * 1000, -1, LONG_MAX),
    _Key("retention.bytes", "retention_bytes", -1, -1, LONG_MAX),
    _Key("delete.retention.ms", "delete_retention_ms", 24 * 3600 * 1000, 0, LONG_MAX),
    _Key("min.compaction.lag.ms", "min_compaction_lag_ms", 0, 0, LONG_MAX),
    _Key("flush.messages", "flush_messages", LONG_MAX, 1, LONG_MAX),
    _Key("flush.ms", "flush_ms", LONG_MAX, 0, LONG_MAX),
    _Key("max.message.bytes", "max_message_bytes", 1024 * 1024 + 12, 0, INT_MAX),
)
_FLOAT_KEYS = (
    _Key("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", 0.5, 0, 1),
)
_CLEANUP_POLICY = "cleanup.policy"
_TIMESTAMP_TYPE = "message.timestamp.type"
_COMPRESSION_TYPE = "compression.type"
_FORMAT_VERSION = "message.format.version"
_KEYS = {k.name: k for k in _INT_KEYS + _FLOAT_KEYS}
KNOWN_KEYS = frozenset(_KEYS) | {_CLEANUP_POLICY, _TIMESTAMP_TYPE, _COMPRESSION_TYPE,
                                 _FORMAT_VERSION}

#: compression.type: the codec the log stores batches in; ``producer`` keeps each batch's
#: own (Kafka's BrokerCompressionType names).
COMPRESSION_PRODUCER = "producer"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", COMPRESSION_PRODUCER)
#: message.format.version: Kafka's release versions (MetadataVersion's short names). Kafka 3
#: accepts and ignores it (inter.broker.protocol.version >= 3.0 always writes format v2),
#: and so does ringlog, which writes only v2.
FORMAT_RELEASES = frozenset(
    ["0.8.0", "0.8.1", "0.8.2", "0.9.0", "0.10.0", "0.10.1", "0.10.2", "0.11.0", "1.0",
     "1.1"] + [f"2.{minor}" for minor in range(9)] + [f"3.{minor}" for minor in range(10)])
FORMAT_VERSION_DEFAULT = "3.0-IV1"


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """The settings one ``PartitionLog`` obeys (Kafka's topic-level configs).

    Attributes use the Python spelling of Kafka's names (``segment.bytes`` ->
    ``segment_bytes``). ``cleanup_policy`` is a frozenset drawn from ``{"delete",
    "compact"}``; ``message_timestamp_type`` is ``"CreateTime"`` or ``"LogAppendTime"``.
    Immutable, so any thread may read one.
    """

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    cleanup_policy: frozenset = frozenset({CLEANUP_POLICY_DELETE})
    delete_retention_ms: int = 24 * 3600 * 1000
    min_compaction_lag_ms: int = 0
    min_cleanable_dirty_ratio: float = 0.5
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_type: str = TIMESTAMP_TYPE_CREATE_TIME
    compression_type: str = COMPRESSION_PRODUCER
    message_format_version: str = FORMAT_VERSION_DEFAULT

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def from_dict(cls, props=None):
        """Build from Kafka's names; missing keys take Kafka's defaults."""
        values = {}
        for name, raw in (props or {}).items():
            if name in _KEYS:
                key = _KEYS[name]
                values[key.attribute] = _parse_number(key, raw)
            elif name == _CLEANUP_POLICY:
                values["cleanup_policy"] = _parse_cleanup_policy(raw)
            elif name == _TIMESTAMP_TYPE:
                values["message_timestamp_type"] = _parse_timestamp_type(raw)
            elif name == _COMPRESSION_TYPE:
                values["compression_type"] = _parse_compression_type(raw)
            elif name == _FORMAT_VERSION:
                values["message_format_version"] = _parse_format_version(raw)
            else:
                raise InvalidLogConfigError(
                    f"unknown log config {name!r} (value {raw!r}); known: "
                    f"{', '.join(sorted(KNOWN_KEYS))}")
        return cls(**values)

    def updated(self, props):
        """A copy with the keys in ``props`` (Kafka's names) replaced."""
        merged = self.to_dict()
        merged.update(props)
        return LogConfig.from_dict(merged)

    def to_dict(self):
        """Kafka's names and this config's values (the inverse of ``from_dict``)."""
        out = {k.name: getattr(self, k.attribute) for k in _INT_KEYS + _FLOAT_KEYS}
        out[_CLEANUP_POLICY] = ",".join(sorted(self.cleanup_policy))
        out[_TIMESTAMP_TYPE] = self.message_timestamp_type
        out[_COMPRESSION_TYPE] = self.compression_type
        out[_FORMAT_VERSION] = self.message_format_version
        return out

    # -- derived (once per config: it is immutable; read on every append) --------------------

    @functools.cached_property
    def compact(self):
        return CLEANUP_POLICY_COMPACT in self.cleanup_policy

    @functools.cached_property
    def delete(self):
        return CLEANUP_POLICY_DELETE in self.cleanup_policy

    @functools.cached_property
    def log_append_time(self):
        return self.message_timestamp_type == TIMESTAMP_TYPE_LOG_APPEND_TIME

    @functools.cached_property
    def recompress_to(self):
        """The codec name (``compression.CODEC_NAMES``) producer batches are stored in, or
        None: ``producer``, each batch as it came."""
        if self.compression_type == COMPRESSION_PRODUCER:
            return None
        return "none" if self.compression_type == "uncompressed" else self.compression_type


def _parse_number(key, raw):
    kind = float if key in _FLOAT_KEYS else int
    if isinstance(raw, bool):
        value = None
    elif isinstance(raw, kind) or (kind is float and isinstance(raw, int)):
        value = raw
    else:
        try:
            value = kind(str(raw).strip())
        except ValueError:
            value = None
    if value is None:
        raise InvalidLogConfigError(
            f"invalid value {raw!r} for log config {key.name!r}: expected "
            f"{'a number' if kind is float else 'an integer'}")
    if (key.minimum is not None and value < key.minimum) or (
            key.maximum is not None and value > key.maximum):
        raise InvalidLogConfigError(
            f"invalid value {raw!r} for log config {key.name!r}: expected a value in "
            f"[{key.minimum}, {key.maximum}]")
    return value


def _parse_cleanup_policy(raw):
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    policy = frozenset(str(i).strip() for i in items)
    allowed = {CLEANUP_POLICY_DELETE, CLEANUP_POLICY_COMPACT}
    if not policy or not policy <= allowed:
        raise InvalidLogConfigError(
            f"invalid value {raw!r} for log config {_CLEANUP_POLICY!r}: expected "
            f"'delete', 'compact' or 'compact,delete'")
    return policy


def _parse_timestamp_type(raw):
    allowed = (TIMESTAMP_TYPE_CREATE_TIME, TIMESTAMP_TYPE_LOG_APPEND_TIME)
    if raw not in allowed:
        raise InvalidLogConfigError(
            f"invalid value {raw!r} for log config {_TIMESTAMP_TYPE!r}: expected one of "
            f"{', '.join(allowed)}")
    return raw


def _parse_compression_type(raw):
    if raw not in COMPRESSION_TYPES:
        raise InvalidLogConfigError(
            f"invalid value {raw!r} for log config {_COMPRESSION_TYPE!r}: expected one of "
            f"{', '.join(COMPRESSION_TYPES)}")
    return raw


def _parse_format_version(raw):
    """A Kafka release version as Kafka's MetadataVersion.fromVersionString reads it:
    ``0.10.0.0`` -> ``0.10.0``, ``2.8.1`` -> ``2.8``, an ``-IVn`` suffix allowed."""
    text = str(raw).strip()
    release = text.partition("-IV")[0]
    parts = release.split(".")
    short = ".".join(parts[:3] if parts[0] == "0" else parts[:2])
    if short not in FORMAT_RELEASES or not all(p.isdigit() for p in parts):
        raise InvalidLogConfigError(
            f"invalid value {raw!r} for log config {_FORMAT_VERSION!r}: expected a Kafka "
            f"release version such as 0.10.0, 2.8 or 3.0-IV1")
    return text
