"""Client configuration: the keyword arguments kafka-python's clients take, validated.

``ProducerConfig(**configs)``, ``ConsumerConfig(**configs)`` and
``AdminClientConfig(**configs)`` take kafka-python's snake_case names with kafka-python's
defaults (``DEFAULT_CONFIG``, as in kafka-python 3.x), and Kafka's dotted spelling of the
same names (``batch.size`` is ``batch_size``; pass it as ``**{"batch.size": 1024}`` or from
a properties file). Each is a read-only ``dict`` keyed by the snake_case names, read as
``config["linger_ms"]``. An unknown name raises ``KafkaConfigurationError`` naming it (as
kafka-python does); so does a bad value, naming the key as given, the value and what was
expected; so do contradictory keys (Kafka's and kafka-python's rules between keys).

Values are normalized once here so clients need not: ``acks`` is 0, 1 or -1 (``'all'`` is
-1); ``compression_type`` is ``None`` or a codec name (``'none'`` is ``None``);
``bootstrap_servers`` a tuple of strings; ``partitioner`` ``None``, one of
``PARTITIONER_NAMES``, a partitioner object or a callable, checked here and turned into a
partitioner object by the producer (``cluster.producer.partitioner.resolve_partitioner``,
one per producer); ``partition_assignment_strategy`` a tuple of
assignor protocol names (``'range'``, ``'roundrobin'``, ``'sticky'``,
``'cooperative-sticky'``; Kafka's class names
and kafka-python's built-in assignor classes map to them) or custom assignor objects.

Differences from kafka-python's defaults: ``client_id`` is ``ringlog-<version>`` where
kafka-python uses ``kafka-python-<version>`` (the producer's stays ``None``: the producer
numbers its own); ``buffer_memory`` (gone from kafka-python 3, Kafka's ``buffer.memory``)
is Kafka's 32 MiB, the size of the producer's ``BufferPool``; object-valued defaults
(``kafka_client``, ``selector``, ``socket_options``) are ``None``.

Keys about sockets, TLS, SASL, DNS, proxies and metrics are accepted with kafka-python's
defaults so that kafka-python code runs unchanged, and have no effect: connections here are
shared-memory rings, private to the host (``COMPAT_KEYS``).

ringlog's own keys, also on every client: ``ringlog_spin_iterations`` (20) and
``ringlog_park_timeout_ms`` (50), as on the broker (``cluster.config.broker``); ``wait_policy()``
turns them into the rings' ``WaitPolicy``.

Owner: the client that built it. Immutable: any thread (the producer's sender, the
consumer's fetcher) may read it.
"""
from __future__ import annotations

import difflib
import importlib.metadata
import logging
import math
import re
import time

from cluster.config.keys import (
    PARK_TIMEOUT_MS,
    SPIN_ITERATIONS,
    Anything,
    Bool,
    Choice,
    FrozenConfig,
    Hook,
    Int,
    Key,
    Str,
    invalid_value,
    keys,
    wait_policy,
)
from cluster.errors import KafkaConfigurationError
from segments.log_config import INT_MAX, LONG_MAX
from segments.record.compression import CODEC_NAMES

log = logging.getLogger(__name__)

#: kafka-python's ``client_id`` pattern, with ringlog's name and version.
DEFAULT_CLIENT_ID = f"ringlog-{importlib.metadata.version('ringlog')}"

#: Built-in assignors, by Kafka's protocol name.
ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")
_JAVA_ASSIGNORS = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}
_KAFKA_PYTHON_ASSIGNORS = "kafka.coordinator.assignors."

#: Most in-flight requests per connection an idempotent producer may have (Kafka's rule).
MAX_IDEMPOTENT_IN_FLIGHT = 5

_GROUP_INSTANCE_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")


# -- parsers of single values ------------------------------------------------------------------

def _acks(raw):
    value = raw.strip() if isinstance(raw, str) else raw
    if value == "all":
        return -1
    if isinstance(value, str) and value in ("0", "1", "-1"):
        return int(value)
    if type(value) is int and value in (0, 1, -1):
        return value
    raise ValueError("one of 0, 1, -1, 'all'")


def _compression_type(raw):
    if raw is None:
        return None
    if isinstance(raw, str):
        name = raw.strip().lower()
        if name in CODEC_NAMES.values():
            return None if name == "none" else name
    raise ValueError("one of None, " + ", ".join(map(repr, CODEC_NAMES.values())))


#: The built-in partitioners by name (``cluster.producer.partitioner.PARTITIONERS`` maps each
#: to its class).
PARTITIONER_NAMES = ("default", "random", "round_robin", "sticky")


def _partitioner(raw):
    """``partitioner=``: None, a built-in's name, a partitioner object or a callable."""
    if (raw is None or raw in PARTITIONER_NAMES or callable(raw)
            or (hasattr(raw, "partition") and hasattr(raw, "on_new_batch"))):
        return raw
    raise ValueError(f"None, one of {', '.join(map(repr, PARTITIONER_NAMES))}, a "
                     "partitioner object or a callable(key_bytes, all_partitions, "
                     "available)")


def _servers(raw):
    items = raw.split(",") if isinstance(raw, str) else raw
    if isinstance(items, (list, tuple)) and all(isinstance(i, str) for i in items):
        servers = tuple(i.strip() for i in items if i.strip())
        if servers:
            return servers
    raise ValueError("a 'host[:port]' string, several separated by commas, or a list of them")


def _assignors(raw):
    items = raw.split(",") if isinstance(raw, str) else raw
    expected = (f"a non-empty list of assignor names ({', '.join(map(repr, ASSIGNORS))}), "
                "Kafka assignor class names, or assignor objects with a name")
    if not isinstance(items, (list, tuple)) or not items:
        raise ValueError(expected)
    assignors = []
    for item in items:
        if isinstance(item, str):
            name = _JAVA_ASSIGNORS.get(item.strip(), item.strip())
            if name not in ASSIGNORS:
                raise ValueError(expected)
            assignors.append(name)
        elif not isinstance(getattr(item, "name", None), str):
            raise ValueError(expected)
        elif (getattr(item, "__module__", "").startswith(_KAFKA_PYTHON_ASSIGNORS)
              and item.name in ASSIGNORS):
            assignors.append(item.name)  # kafka-python's built-in: use ringlog's
        else:
            assignors.append(item)
    return tuple(assignors)


def _auto_offset_reset(raw):
    value = raw.strip() if isinstance(raw, str) else raw
    deprecated = {"smallest": "earliest", "largest": "latest"}
    if value in deprecated:
        log.warning("use auto_offset_reset=%r (%r is deprecated)", deprecated[value], value)
        return deprecated[value]
    return Choice("earliest", "latest", "none")(value)


def _group_instance_id(raw):
    if raw is None or (isinstance(raw, str) and raw not in (".", "..")
                       and _GROUP_INSTANCE_ID.fullmatch(raw)):
        return raw
    raise ValueError("None, or 1 to 249 ASCII letters, digits, '.', '_' and '-' "
                     "(not '.' or '..')")


# -- keys ------------------------------------------------------------------------------------

_ms = Int(0, LONG_MAX, fractional=True)
_int_ms = Int(0, INT_MAX, fractional=True)
_bytes = Int(0, INT_MAX)


def _common_keys(client_id=DEFAULT_CLIENT_ID):
    """The keys of every client; ``client_id``: its default."""
    return (
        Key("bootstrap_servers", _servers, "localhost"),
        Key("client_id", Str(nullable=True), client_id),
        Key("request_timeout_ms", _int_ms, 30000),
        Key("retry_backoff_ms", _ms, 100),
        Key("metadata_max_age_ms", _ms, 300000),
        Key("max_in_flight_requests_per_connection", Int(1, INT_MAX), 5),
        Key("connections_max_idle_ms", _ms, 540000),
        Key("reconnect_backoff_ms", _ms, 50),
        Key("reconnect_backoff_max_ms", _ms, 30000),
        Key(SPIN_ITERATIONS[0].replace(".", "_"), *SPIN_ITERATIONS[1:]),
        Key(PARK_TIMEOUT_MS[0].replace(".", "_"), *PARK_TIMEOUT_MS[1:]),
    )

#: kafka-python keys accepted with kafka-python's defaults and no effect (module doc).
COMPAT_KEYS = {
    "api_version": None, "bootstrap_timeout_ms": 30000,
    "client_dns_lookup": "use_all_dns_ips", "kafka_client": None, "metric_reporters": (),
    "metrics_num_samples": 2, "metrics_sample_window_ms": 30000, "proxy_url": None,
    "receive_buffer_bytes": None, "receive_message_max_bytes": 100000000,
    "sasl_kerberos_domain_name": None, "sasl_kerberos_name": None,
    "sasl_kerberos_service_name": "kafka", "sasl_mechanism": None,
    "sasl_oauth_token_provider": None, "sasl_plain_password": None,
    "sasl_plain_username": None, "security_protocol": "PLAINTEXT", "selector": None,
    "send_buffer_bytes": None, "socket_options": None, "socks5_proxy": None,
    "ssl_cafile": None, "ssl_certfile": None, "ssl_check_hostname": True,
    "ssl_ciphers": None, "ssl_context": None, "ssl_crlfile": None, "ssl_keyfile": None,
    "ssl_password": None,
}
_CLIENT_COMPAT_KEYS = {"metrics_enabled": True}
_CONSUMER_COMPAT_KEYS = {
    "client_rack": "", "enable_incremental_fetch_sessions": True,
    "metric_group_prefix": "consumer",
}


def _compat(*tables):
    return tuple(Key(name, Anything(), default)
                 for table in tables for name, default in table.items())


# -- the configs -------------------------------------------------------------------------------

class ClientConfig(FrozenConfig):
    """kafka-python-style client configuration (see the module doc); subclasses set ``KIND``
    and ``KEYS`` and may add rules between keys in ``_resolve``.

    ``provided`` holds the keys the caller gave (snake_case) with their raw values.
    """

    __slots__ = ("provided",)
    KIND = None
    KEYS = {}
    #: snake_case name -> default, as kafka-python's ``DEFAULT_CONFIG``.
    DEFAULT_CONFIG = {}
    #: every accepted spelling -> snake_case name
    SPELLINGS = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.DEFAULT_CONFIG = {name: key.default for name, key in cls.KEYS.items()}
        cls.SPELLINGS = {name.replace("_", "."): name for name in cls.KEYS}
        cls.SPELLINGS.update((name, name) for name in cls.KEYS)

    def __init__(self, **configs):
        given = {}  # snake_case name -> (spelling given, raw value)
        unknown = []
        for spelling, raw in configs.items():
            name = self.SPELLINGS.get(spelling)
            if name is None:
                unknown.append(spelling)
            elif name in given:
                first, first_raw = given[name]
                raise KafkaConfigurationError(
                    f"{self.KIND} config {name!r} given twice: {first}={first_raw!r} and "
                    f"{spelling}={raw!r}")
            else:
                given[name] = (spelling, raw)
        if unknown:
            raise self._unrecognized(unknown)
        values = {}
        for name, key in self.KEYS.items():
            spelling, raw = given.get(name, (name, key.default))
            try:
                values[name] = key.parse(raw)
            except ValueError as exc:
                raise invalid_value(KafkaConfigurationError, self.KIND, spelling, raw,
                                    exc.args[0]) from None
        self._resolve(values, given)
        self.provided = {name: raw for name, (_, raw) in given.items()}
        self._fill(values)

    def _unrecognized(self, unknown):
        hints = []
        for spelling in sorted(unknown):
            # a hint in the spelling given: Kafka's dotted names for a dotted one
            dotted = "." in spelling
            names = [n.replace("_", ".") for n in self.KEYS] if dotted else self.KEYS
            close = difflib.get_close_matches(spelling, names, n=1)
            hints.append(f"{spelling!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        return KafkaConfigurationError(f"Unrecognized {self.KIND} configs: {', '.join(hints)}")

    def _resolve(self, values, given):
        """Apply the rules between keys to ``values`` (parsed); ``given`` as in __init__."""

    def replace(self, **changes):
        """A new config: the keys given here (either spelling) replace this one's."""
        merged = dict(self.provided)
        for spelling, raw in changes.items():
            merged[self.SPELLINGS.get(spelling, spelling)] = raw
        return type(self)(**merged)

    def __reduce__(self):
        return _rebuild, (type(self), self.provided)

    def wait_policy(self, clock=time.monotonic):
        """How this client waits on its rings (spin, then park)."""
        return wait_policy(self["ringlog_spin_iterations"], self["ringlog_park_timeout_ms"],
                           clock)


def _rebuild(cls, provided):
    return cls(**provided)


class ProducerConfig(ClientConfig):
    """``KafkaProducer``'s configuration (kafka-python's keys, Kafka's rules)."""

    __slots__ = ()
    KIND = "producer"
    KEYS = keys(
        *_common_keys(client_id=None),
        Key("key_serializer", Hook("serialize"), None),
        Key("value_serializer", Hook("serialize"), None),
        Key("enable_idempotence", Bool(), True),
        Key("transactional_id", Str(nullable=True), None),
        Key("transaction_timeout_ms", _int_ms, 60000),
        Key("delivery_timeout_ms", _int_ms, 120000),
        Key("acks", _acks, -1),
        Key("compression_type", _compression_type, None),
        Key("retries", Int(0, INT_MAX, infinite=True), math.inf),
        Key("batch_size", _bytes, 16384),
        Key("linger_ms", _ms, 0),
        Key("partitioner", _partitioner, None),
        Key("buffer_memory", Int(0, LONG_MAX), 32 * 1024 * 1024),
        Key("max_block_ms", _ms, 60000),
        Key("max_request_size", _bytes, 1024 * 1024),
        Key("allow_auto_create_topics", Bool(), True),
        *_compat(COMPAT_KEYS, _CLIENT_COMPAT_KEYS),
    )

    def _resolve(self, values, given):
        self._resolve_idempotence(values, given)
        floor = values["linger_ms"] + values["request_timeout_ms"]
        if values["delivery_timeout_ms"] < floor:
            text = (f"delivery_timeout_ms ({values['delivery_timeout_ms']}) should be at "
                    f"least linger_ms + request_timeout_ms ({values['linger_ms']} + "
                    f"{values['request_timeout_ms']})")
            if "delivery_timeout_ms" in given:
                raise KafkaConfigurationError(text)
            log.warning("%s; using %s (Kafka's rule)", text, floor)
            values["delivery_timeout_ms"] = floor

    @staticmethod
    def _resolve_idempotence(values, given):
        """Kafka's KIP-679 rules, as kafka-python 3 applies them: idempotence (the default)
        needs acks=all, retries > 0 and at most 5 requests in flight. A conflicting key the
        user set turns idempotence off (logged at info, as Kafka does), unless the user also
        asked for idempotence or a transactional_id: then it raises."""
        explicit = "enable_idempotence" in given
        if values["transactional_id"] is not None:
            if explicit and not values["enable_idempotence"]:
                raise KafkaConfigurationError(
                    f"transactional_id={values['transactional_id']!r} needs "
                    f"enable_idempotence=True, found {given['enable_idempotence'][1]!r}")
            values["enable_idempotence"] = explicit = True
        if not values["enable_idempotence"]:
            return
        conflicts = [
            f"{given[name][0]}={given[name][1]!r}" for name, bad in (
                ("acks", values["acks"] != -1),
                ("retries", values["retries"] == 0),
                ("max_in_flight_requests_per_connection",
                 values["max_in_flight_requests_per_connection"] > MAX_IDEMPOTENT_IN_FLIGHT),
            ) if bad and name in given]
        if not conflicts:
            return
        text = (f"idempotence needs acks='all', retries > 0 and "
                f"max_in_flight_requests_per_connection <= {MAX_IDEMPOTENT_IN_FLIGHT}; "
                f"found {', '.join(conflicts)}")
        if explicit:
            raise KafkaConfigurationError(f"enable_idempotence=True conflicts: {text}")
        log.info("idempotence disabled: %s", text)  # as Kafka: info, not a warning
        values["enable_idempotence"] = False


class ConsumerConfig(ClientConfig):
    """``KafkaConsumer``'s configuration (kafka-python's keys and rules)."""

    __slots__ = ()
    KIND = "consumer"
    KEYS = keys(
        *_common_keys(),
        Key("group_id", Str(nullable=True), None),
        Key("group_instance_id", _group_instance_id, None),
        Key("key_deserializer", Hook("deserialize"), None),
        Key("value_deserializer", Hook("deserialize"), None),
        Key("fetch_min_bytes", _bytes, 1),
        Key("fetch_max_wait_ms", _int_ms, 500),
        Key("fetch_max_bytes", _bytes, 50 * 1024 * 1024),
        Key("max_partition_fetch_bytes", _bytes, 1024 * 1024),
        Key("auto_offset_reset", _auto_offset_reset, "latest"),
        Key("enable_auto_commit", Bool(), True),
        Key("auto_commit_interval_ms", _ms, 5000),
        Key("default_offset_commit_callback", Hook(), None),
        Key("check_crcs", Bool(), True),
        Key("max_poll_records", Int(1, INT_MAX), 500),
        Key("max_poll_interval_ms", Int(1, INT_MAX, fractional=True), 300000),
        Key("session_timeout_ms", Int(1, INT_MAX, fractional=True), 45000),
        Key("heartbeat_interval_ms", Int(1, INT_MAX, fractional=True), 3000),
        Key("isolation_level", Choice("read_uncommitted", "read_committed"),
            "read_uncommitted"),
        Key("consumer_timeout_ms", Int(0, LONG_MAX, fractional=True, infinite=True), math.inf),
        Key("partition_assignment_strategy", _assignors, ("range", "roundrobin")),
        Key("exclude_internal_topics", Bool(), True),
        Key("allow_auto_create_topics", Bool(), True),
        Key("default_api_timeout_ms", _int_ms, 60000),
        *_compat(COMPAT_KEYS, _CLIENT_COMPAT_KEYS, _CONSUMER_COMPAT_KEYS),
    )

    def _resolve(self, values, given):
        wait, request, idle = (values["fetch_max_wait_ms"], values["request_timeout_ms"],
                               values["connections_max_idle_ms"])
        if not wait < request < idle:
            raise KafkaConfigurationError(
                f"connections_max_idle_ms ({idle}) must be larger than request_timeout_ms "
                f"({request}) which must be larger than fetch_max_wait_ms ({wait})")
        if values["group_id"] is None:
            if values["group_instance_id"] is not None:
                raise KafkaConfigurationError(
                    f"group_instance_id={values['group_instance_id']!r} needs a group_id, "
                    f"found group_id=None")
            return
        heartbeat, session = values["heartbeat_interval_ms"], values["session_timeout_ms"]
        if heartbeat >= session:
            raise KafkaConfigurationError(
                f"heartbeat_interval_ms ({heartbeat}) must be lower than session_timeout_ms "
                f"({session})")
        if heartbeat > session / 3:
            log.warning("heartbeat_interval_ms (%s) is more than a third of session_timeout_ms "
                        "(%s): a member may be dropped after one late heartbeat",
                        heartbeat, session)


class AdminClientConfig(ClientConfig):
    """``KafkaAdminClient``'s configuration (kafka-python's keys)."""

    __slots__ = ()
    KIND = "admin client"
    KEYS = keys(*_common_keys(), *_compat(COMPAT_KEYS))
