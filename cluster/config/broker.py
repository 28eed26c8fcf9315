"""Broker configuration: Kafka's broker keys and defaults, ringlog's transport keys.

``BrokerConfig.load("server.properties", overrides=["broker.id=2"], data_dir=...)`` reads
a properties file as ``kafka-server-start.sh`` does (``--override`` pairs win over the
file, the file wins over the defaults); ``BrokerConfig({...}, data_dir=...)`` takes Kafka's
names from code, as strings or typed values. The result is a read-only ``dict`` from
Kafka's broker names to typed values, plus ``log.dirs``.

As Kafka does, keys this broker does not know are logged (a warning naming each) and
ignored; a bad value raises ``InvalidConfigurationError`` (errno 40, INVALID_CONFIG)
naming the key, the value and what was expected.

Differences from Kafka:

- ``log.dirs`` is not a setting: it is ``<data_dir>/broker-<broker.id>`` (one directory;
  ``None`` until both are known). A ``log.dirs`` or ``log.dir`` given is logged and ignored.
- ``broker.id``, ``default.replication.factor``, ``replica.lag.time.max.ms``,
  ``replica.fetch.wait.max.ms``, ``group.*.ms`` have no lower bound in Kafka; here they
  must be at least -1 (an id; -1: not assigned yet), 1 (a factor) or 0 (a time), and
  ``replica.high.watermark.checkpoint.interval.ms`` at least 1 (a timer period).

``broker.heartbeat.interval.ms`` (500) and ``broker.session.timeout.ms`` (6000) are
Kafka's keys with defaults for brokers sharing one host (``replica_proc.heartbeat`` says
why); ``controlled.shutdown.max.retries`` (3) and ``controlled.shutdown.retry.backoff.ms``
(5000) bound how long a stopping broker waits for its leaderships to move
(``replica_proc.broker``).

- ``replica.fetch.backoff.ms`` defaults to 100, not Kafka's 1000. A follower backs off
  after an error of its leader, and on one host the usual one is transient: the leader's
  loop has not yet applied the metadata page this broker already read (NOT_LEADER_OR_FOLLOWER,
  UNKNOWN_LEADER_EPOCH), which it does within one turn of its loop (50 ms at most). Kafka's
  second, sized for a network round trip and a ZooKeeper/KRaft propagation, would stall
  replication that long after every leader change for nothing.

Topic-level configuration. Each topic config has broker synonyms (Kafka's
``ServerTopicConfigSynonyms``): ``log.segment.bytes`` is the default of ``segment.bytes``,
``message.max.bytes`` of ``max.message.bytes``, and ``segment.ms`` comes from
``log.roll.ms``, else ``log.roll.hours``; ``retention.ms`` from ``log.retention.ms``, else
``log.retention.minutes``, else ``log.retention.hours``, and any negative result means
unlimited (-1), as ``KafkaConfig.logRetentionTimeMillis`` computes it. ``topic_config``
merges a topic's overrides (topic-level names) over those defaults, ``log_config`` makes the
``segments.log_config.LogConfig`` a partition log obeys. ``LogConfig`` owns the topic-level
keys of the log (their defaults and ranges); this module only maps broker names to them.

ringlog's own keys (prefix ``ringlog.``):

- ``ringlog.ring.bytes`` (default 4 MiB): capacity of each of a connection's two rings
  (request and response). A power of two from 64 bytes to 1 GiB, and large enough that one
  frame can carry ``max(message.max.bytes, replica.fetch.max.bytes)`` plus
  ``FRAME_HEADROOM_BYTES`` (a ring accepts frames up to half its capacity), so the common
  batch and fetch travel in one frame; anything longer (a topic's larger
  ``max.message.bytes``, a Metadata response of many partitions) goes as fragments
  (``shm_ring``), so no limit here bounds what a broker serves.
- ``ringlog.spin.iterations`` (default 20): checks of a ring before a waiter parks.
- ``ringlog.park.timeout.ms`` (default 50): longest single block while parked; the peer's
  liveness is checked after each (``shm_ring.wakeup.WaitPolicy.poll_interval``).
- ``ringlog.max.open.segment.files`` (default -1: half the process's RLIMIT_NOFILE soft
  limit): the bound of the broker's cache of open segment files (``segments.file_cache``);
  the other half is left to rings, checkpoints and the metadata log.
- ``ringlog.gc.freeze`` (default true): ``gc.freeze()`` once start-up is done, just before
  the broker serves: what start-up made (modules, config, the logs it opened) is left out of
  every later collection, so a full collection scans what the requests made only (README,
  "GC and memory").
- ``ringlog.fsync`` (default true): false skips every fsync of the broker's storage
  (``segments.durability``): UNSAFE, a machine's crash may lose acknowledged records; for
  test suites only (the ``dev`` profile sets it, ``cluster.config.profiles``).
- ``ringlog.max.partitions.per.broker`` (default -1: the RLIMIT_NOFILE soft limit, so a
  broker hosts at most as many partitions as it may open files): the controller refuses a
  CreateTopics, CreatePartitions or auto-creation that would put more replicas on a broker
  (POLICY_VIOLATION). Sealed segments and idle partitions hold no descriptor, so the
  limit is what bounds a broker's descriptors when every partition is in use.
  ``max_partitions_per_broker()`` and ``max_open_segment_files()`` give the value in
  force and where it comes from.

Owner: the broker process (or the launcher that builds one per broker). Immutable: any
thread may read it.
"""
from __future__ import annotations

import logging
import os
import time

from cluster.config.keys import (
    PARK_TIMEOUT_MS,
    SHORT_MAX,
    SPIN_ITERATIONS,
    Bool,
    FrozenConfig,
    Int,
    Key,
    invalid_value,
    keys,
    wait_policy,
)
from cluster.config.properties import load_properties, parse_overrides
from cluster.errors import InvalidConfigurationError
from cluster.protocol.frame_descriptor import FRAME_HEADROOM_BYTES
from segments.file_cache import open_files_limit
from segments.log_config import INT_MAX, KNOWN_KEYS, LONG_MAX, InvalidLogConfigError, LogConfig
from shm_ring import ring_descriptor

log = logging.getLogger(__name__)

MINUTE_MS = 60 * 1000
HOUR_MS = 60 * MINUTE_MS

#: Broker keys derived here, not read (see the module doc).
DERIVED_KEYS = ("log.dirs", "log.dir")

_LOG_DEFAULTS = LogConfig().to_dict()


class _LogConfigValue:
    """Parse a topic config, or a broker key by its topic-level synonym's rules
    (``LogConfig``'s); ``synonym``: say so in errors."""

    __slots__ = ("topic_name", "synonym")

    def __init__(self, topic_name, synonym=False):
        self.topic_name = topic_name
        self.synonym = synonym

    def __call__(self, raw):
        try:
            return LogConfig.from_dict({self.topic_name: raw}).to_dict()[self.topic_name]
        except InvalidLogConfigError as exc:
            # LogConfig says "invalid value ... for log config ...: expected <what>".
            _, found, expected = exc.args[0].partition(": expected ")
            expected = expected if found else exc.args[0]
            if self.synonym:
                expected += f" (as topic config {self.topic_name!r})"
            raise ValueError(expected) from None


def _log_key(name, topic_name):
    return Key(name, _LogConfigValue(topic_name, synonym=True), _LOG_DEFAULTS[topic_name])


def _ring_bytes(raw):
    value = Int(ring_descriptor.MIN_CAPACITY, ring_descriptor.MAX_CAPACITY)(raw)
    if value & (value - 1):
        raise ValueError(f"a power of two in [{ring_descriptor.MIN_CAPACITY}, "
                         f"{ring_descriptor.MAX_CAPACITY}]")
    return value


REPLICA_FETCH_BACKOFF_MS = 100
"""ringlog's default of replica.fetch.backoff.ms (Kafka's is 1000): see the module doc."""

_ms = Int(0, LONG_MAX)
_int_ms = Int(0, INT_MAX)

BROKER_KEYS = keys(
    Key("broker.id", Int(-1, INT_MAX), -1),
    Key("num.partitions", Int(1, INT_MAX), 1),
    Key("default.replication.factor", Int(1, INT_MAX), 1),
    Key("min.insync.replicas", Int(1, INT_MAX), 1),
    Key("auto.create.topics.enable", Bool(), True),
    Key("delete.topic.enable", Bool(), True),
    _log_key("log.segment.bytes", "segment.bytes"),
    Key("log.roll.ms", Int(nullable=True), None),
    Key("log.roll.hours", Int(1, INT_MAX), 168),
    Key("log.retention.ms", Int(nullable=True), None),
    Key("log.retention.minutes", Int(-2**31, INT_MAX, nullable=True), None),
    Key("log.retention.hours", Int(-2**31, INT_MAX), 168),
    _log_key("log.retention.bytes", "retention.bytes"),
    Key("log.retention.check.interval.ms", Int(1, LONG_MAX), 5 * MINUTE_MS),
    _log_key("log.cleanup.policy", "cleanup.policy"),
    _log_key("log.cleaner.delete.retention.ms", "delete.retention.ms"),
    _log_key("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms"),
    _log_key("log.cleaner.min.cleanable.ratio", "min.cleanable.dirty.ratio"),
    _log_key("log.flush.interval.messages", "flush.messages"),
    Key("log.flush.interval.ms", Int(nullable=True), None),
    Key("log.flush.scheduler.interval.ms", Int(), LONG_MAX),
    _log_key("log.index.interval.bytes", "index.interval.bytes"),
    _log_key("log.index.size.max.bytes", "segment.index.bytes"),
    _log_key("log.message.timestamp.type", "message.timestamp.type"),
    _log_key("compression.type", "compression.type"),
    _log_key("log.message.format.version", "message.format.version"),
    _log_key("message.max.bytes", "max.message.bytes"),
    Key("producer.id.expiration.ms", Int(1, INT_MAX), 86400000),
    Key("producer.id.expiration.check.interval.ms", Int(1, INT_MAX), 600000),
    Key("replica.lag.time.max.ms", _ms, 30000),
    Key("replica.high.watermark.checkpoint.interval.ms", Int(1, LONG_MAX), 5000),
    Key("replica.fetch.max.bytes", Int(0, INT_MAX), 1024 * 1024),
    Key("replica.fetch.wait.max.ms", _int_ms, 500),
    Key("replica.fetch.min.bytes", Int(1, INT_MAX), 1),
    Key("replica.fetch.response.max.bytes", Int(0, INT_MAX), 10 * 1024 * 1024),
    Key("replica.fetch.backoff.ms", _int_ms, REPLICA_FETCH_BACKOFF_MS),
    Key("unclean.leader.election.enable", Bool(), False),
    Key("auto.leader.rebalance.enable", Bool(), True),
    Key("leader.imbalance.check.interval.seconds", Int(1, LONG_MAX), 300),
    Key("leader.imbalance.per.broker.percentage", Int(0, INT_MAX), 10),
    Key("offsets.topic.num.partitions", Int(1, INT_MAX), 50),
    Key("offsets.topic.replication.factor", Int(1, SHORT_MAX), 3),
    Key("offsets.topic.segment.bytes", Int(1, INT_MAX), 104857600),
    Key("offsets.commit.timeout.ms", Int(1, INT_MAX), 5000),
    Key("offsets.load.buffer.size", Int(1, INT_MAX), 5 * 1024 * 1024),
    Key("group.initial.rebalance.delay.ms", _int_ms, 3000),
    Key("group.min.session.timeout.ms", _int_ms, 6000),
    Key("group.max.session.timeout.ms", _int_ms, 1800000),
    Key("group.max.size", Int(1, INT_MAX), INT_MAX),
    Key("offsets.retention.minutes", Int(1, INT_MAX), 7 * 24 * 60),
    Key("offsets.retention.check.interval.ms", Int(1, LONG_MAX), 600000),
    Key("offset.metadata.max.bytes", Int(-2**31, INT_MAX), 4096),
    Key("transaction.state.log.num.partitions", Int(1, INT_MAX), 50),
    Key("transaction.state.log.replication.factor", Int(1, SHORT_MAX), 3),
    Key("transaction.state.log.min.isr", Int(1, INT_MAX), 2),
    Key("transaction.state.log.segment.bytes", Int(1, INT_MAX), 104857600),
    Key("transaction.state.log.load.buffer.size", Int(1, INT_MAX), 5 * 1024 * 1024),
    Key("transaction.max.timeout.ms", Int(1, INT_MAX), 900000),
    Key("transactional.id.expiration.ms", Int(1, INT_MAX), 7 * 24 * HOUR_MS),
    Key("transaction.abort.timed.out.transaction.cleanup.interval.ms", Int(1, INT_MAX), 10000),
    Key("transaction.remove.expired.transaction.cleanup.interval.ms", Int(1, INT_MAX),
        HOUR_MS),
    Key("controlled.shutdown.enable", Bool(), True),
    Key("controlled.shutdown.max.retries", Int(0, INT_MAX), 3),
    Key("controlled.shutdown.retry.backoff.ms", _ms, 5000),
    Key("broker.heartbeat.interval.ms", Int(1, INT_MAX), 500),
    Key("broker.session.timeout.ms", Int(1, INT_MAX), 6000),
    Key("ringlog.ring.bytes", _ring_bytes, 4 * 1024 * 1024),
    Key(*SPIN_ITERATIONS),
    Key(*PARK_TIMEOUT_MS),
    Key("ringlog.max.open.segment.files", Int(-1, INT_MAX), -1),
    Key("ringlog.max.partitions.per.broker", Int(-1, INT_MAX), -1),
    Key("ringlog.gc.freeze", Bool(), True),
    Key("ringlog.fsync", Bool(), True),
)

#: Topic config -> its broker synonyms, highest precedence first, each with the factor to
#: the topic config's unit (Kafka's ``ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS``,
#: for the topic configs ringlog has).
TOPIC_SYNONYMS = {
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", HOUR_MS)),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "retention.bytes": (("log.retention.bytes", 1),),
    "retention.ms": (("log.retention.ms", 1), ("log.retention.minutes", MINUTE_MS),
                     ("log.retention.hours", HOUR_MS)),
    "max.message.bytes": (("message.max.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "compression.type": (("compression.type", 1),),
    "message.format.version": (("log.message.format.version", 1),),
    "unclean.leader.election.enable": (("unclean.leader.election.enable", 1),),
    "min.insync.replicas": (("min.insync.replicas", 1),),
}

#: Topic configs that are not the log's (``LogConfig``'s): replication settings, parsed by
#: their same-named broker key's rules.
REPLICATION_TOPIC_KEYS = ("unclean.leader.election.enable", "min.insync.replicas")


class BrokerConfig(FrozenConfig):
    """One broker's configuration: Kafka's broker names -> typed values (see module doc).

    ``props`` are the keys given (Kafka's names; strings as read from a file, or typed
    values); ``data_dir`` is the cluster's data directory. Both are kept as attributes
    (``props`` without the unknown keys), with ``topic_defaults``: topic-level names -> this
    broker's defaults for them.
    """

    __slots__ = ("props", "data_dir", "topic_defaults", "_log_defaults")

    def __init__(self, props=None, *, data_dir=None):
        props = dict(props or {})
        for name in sorted(props.keys() - BROKER_KEYS.keys()):
            if name in DERIVED_KEYS:
                log.warning("broker config %r (value %r) is ignored: ringlog derives log.dirs "
                            "from the data directory", name, props[name])
            else:
                log.warning("The configuration %r was supplied but isn't a known config; "
                            "ignored (value %r)", name, props[name])
            del props[name]
        values = {}
        for name, key in BROKER_KEYS.items():
            raw = props.get(name, key.default)
            try:
                values[name] = key.parse(raw)
            except ValueError as exc:
                raise invalid_value(InvalidConfigurationError, "broker", name, raw,
                                    exc.args[0]) from None
        self.props = props
        self.data_dir = None if data_dir is None else os.fspath(data_dir)
        values["log.dirs"] = (
            None if self.data_dir is None or values["broker.id"] < 0
            else os.path.join(self.data_dir, f"broker-{values['broker.id']}"))
        _check_broker(values)
        self.topic_defaults = _topic_defaults(values, props)
        self._log_defaults = LogConfig.from_dict(
            {k: v for k, v in self.topic_defaults.items() if k in KNOWN_KEYS})
        self._fill(values)

    @classmethod
    def load(cls, path, overrides=(), *, data_dir=None):
        """The config of a properties file plus ``key=value`` overrides (these win)."""
        props = load_properties(path)
        props.update(parse_overrides(overrides))
        return cls(props, data_dir=data_dir)

    def replace(self, props=None, *, data_dir=None):
        """A new config: the keys given here replace this one's (``data_dir`` too, if given)."""
        return BrokerConfig({**self.props, **(props or {})},
                            data_dir=self.data_dir if data_dir is None else data_dir)

    def __reduce__(self):
        return _rebuild, (self.props, self.data_dir)

    # -- topic level ------------------------------------------------------------------------

    def topic_config(self, overrides=None):
        """Topic-level name -> value for a topic with ``overrides`` (topic-level names) over
        this broker's defaults. An unknown name or a bad value raises
        ``InvalidConfigurationError`` naming it."""
        merged = dict(self.topic_defaults)
        for name, raw in (overrides or {}).items():
            if name in KNOWN_KEYS:
                try:
                    merged[name] = _LogConfigValue(name)(raw)
                except ValueError as exc:
                    raise invalid_value(InvalidConfigurationError, "topic", name, raw,
                                        exc.args[0]) from None
            elif name in REPLICATION_TOPIC_KEYS:
                try:
                    merged[name] = BROKER_KEYS[name].parse(raw)
                except ValueError as exc:
                    raise invalid_value(InvalidConfigurationError, "topic", name, raw,
                                        exc.args[0]) from None
            else:
                raise InvalidConfigurationError(
                    f"unknown topic config {name!r} (value {raw!r}); known: "
                    f"{', '.join(sorted(KNOWN_KEYS | set(REPLICATION_TOPIC_KEYS)))}")
        return merged

    def log_config(self, overrides=None):
        """The ``LogConfig`` for a topic with ``overrides`` (topic-level names)."""
        if not overrides:
            return self._log_defaults
        merged = self.topic_config(overrides)
        return LogConfig.from_dict({k: v for k, v in merged.items() if k in KNOWN_KEYS})

    # -- transport --------------------------------------------------------------------------

    def max_partitions_per_broker(self):
        """``(limit, source)``: the partition replicas a broker may host and where that
        number comes from (the key, or ``RLIMIT_NOFILE <n>`` when derived)."""
        return self._limit("ringlog.max.partitions.per.broker", 1)

    def max_open_segment_files(self):
        """``(bound, source)`` of the broker's open segment file cache (as above)."""
        return self._limit("ringlog.max.open.segment.files", 2)

    def _limit(self, name, divisor):
        value = self[name]
        if value >= 0:
            return value, "configured"
        soft = open_files_limit()
        source = f"RLIMIT_NOFILE {soft}" if divisor == 1 else f"RLIMIT_NOFILE {soft} / {divisor}"
        return max(1, soft // divisor), f"derived from {source}"

    def wait_policy(self, clock=time.monotonic):
        """How this broker waits on its rings (spin, then park)."""
        return wait_policy(self["ringlog.spin.iterations"], self["ringlog.park.timeout.ms"],
                           clock)


def _rebuild(props, data_dir):
    return BrokerConfig(props, data_dir=data_dir)


def _check_broker(values):
    """Rules between keys (Kafka's ``KafkaConfig.validateValues`` where it has them)."""
    wait, lag = values["replica.fetch.wait.max.ms"], values["replica.lag.time.max.ms"]
    if wait > lag:
        raise InvalidConfigurationError(
            f"replica.fetch.wait.max.ms ({wait}) must be at most replica.lag.time.max.ms "
            f"({lag}), to prevent frequent changes in ISR")
    beat, session = values["broker.heartbeat.interval.ms"], values["broker.session.timeout.ms"]
    if beat >= session:
        raise InvalidConfigurationError(
            f"broker.heartbeat.interval.ms ({beat}) must be less than "
            f"broker.session.timeout.ms ({session}): a broker would be fenced between two "
            f"heartbeats")
    if values["ringlog.max.open.segment.files"] == 0:
        raise InvalidConfigurationError(
            "ringlog.max.open.segment.files (0) must be -1 (derived from RLIMIT_NOFILE) or at "
            "least 1: a broker must be able to open a segment file")
    ring = values["ringlog.ring.bytes"]
    largest = max(values["message.max.bytes"], values["replica.fetch.max.bytes"])
    if ring_descriptor.max_frame_length(ring) < largest + FRAME_HEADROOM_BYTES:
        needed = 1 << (2 * (largest + FRAME_HEADROOM_BYTES
                            + 2 * ring_descriptor.FRAME_HEADER_LENGTH) - 1).bit_length()
        raise InvalidConfigurationError(
            f"ringlog.ring.bytes ({ring}) is too small: its frames hold at most "
            f"{ring_descriptor.max_frame_length(ring)} bytes, and max(message.max.bytes, "
            f"replica.fetch.max.bytes) ({largest}) + {FRAME_HEADROOM_BYTES} bytes of headroom "
            f"need ringlog.ring.bytes >= {needed}")


def _topic_defaults(values, props):
    """Topic-level name -> value from the broker keys (first synonym set wins); ``props``:
    the raw values given, for errors."""
    defaults = {}
    for topic_name, synonyms in TOPIC_SYNONYMS.items():
        broker_name, factor = next(
            (pair for pair in synonyms if values[pair[0]] is not None), synonyms[-1])
        value = values[broker_name]
        if factor != 1:
            value *= factor
        if topic_name == "retention.ms":
            value = _retention_ms(broker_name, props.get(broker_name), value)
        if topic_name in KNOWN_KEYS and len(synonyms) > 1:
            try:
                value = _LogConfigValue(topic_name, synonym=True)(value)
            except ValueError as exc:
                raise invalid_value(InvalidConfigurationError, "broker", broker_name,
                                    props.get(broker_name), exc.args[0]) from None
        defaults[topic_name] = value
    return defaults


def _retention_ms(broker_name, raw, millis):
    """Kafka's ``logRetentionTimeMillis``: negative means unlimited (-1); 0 is refused."""
    if millis < 0:
        return -1
    if millis == 0:
        raise invalid_value(InvalidConfigurationError, "broker", broker_name, raw,
                            "a time >= 1 ms, or a negative number for unlimited")
    return millis

