"""Dynamic configs: what DescribeConfigs shows, and what AlterConfigs may change, for topics
and brokers (Kafka's ``ConfigHelper``, ``DynamicBrokerConfig`` and
``ConfigurationControlManager``, for the configs ringlog has).

Where the values live: a topic's overrides are ``TopicInfo.configs``; dynamic broker configs
are ``MetadataImage.broker_configs``, ``{"": cluster-wide default, "<id>": that broker}``,
each ``{broker key: value as given}``. Both change only through the active controller (a
metadata record), and every broker applies the new image without a restart:
``effective_broker_config`` is the BrokerConfig a broker then runs with — the per-broker
value over the cluster default over ``server.properties`` over Kafka's default.

Which broker keys are dynamic: the primary broker synonym of each topic config (Kafka's
``DynamicLogConfig``: ``log.segment.bytes``, ``log.retention.ms``, ``log.cleanup.policy``,
``message.max.bytes``, ``min.insync.replicas``, ``unclean.leader.election.enable`` ...):
ringlog's brokers apply them to every log at once. Every other broker key is read-only:
altering it is refused with INVALID_CONFIG naming it, as Kafka refuses.

``describe_topic`` / ``describe_broker`` give ``ConfigEntry`` lists with Kafka's sources and
synonyms (``configSynonyms``: every layer's value of each broker synonym, the most
precedent first, starting from the primary name). ``plan_change`` turns an AlterConfigs or
IncrementalAlterConfigs resource into ``{key: new value or None (deleted)}`` or raises the
Kafka error naming the bad key and value.

Pure functions over immutable values: any thread.
"""
from __future__ import annotations

import enum
from typing import NamedTuple

from cluster.config.broker import BROKER_KEYS, TOPIC_SYNONYMS
from cluster.errors import (
    InvalidConfigurationError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)

#: The name of the cluster-wide default in ``MetadataImage.broker_configs`` (Kafka's
#: ``<default>`` entity: an empty resource name).
CLUSTER_DEFAULT = ""


class ConfigResourceType(enum.IntEnum):
    """Kafka's ``ConfigResource.Type`` ids (kafka-python's ``ConfigResourceType``)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class ConfigSource(enum.IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigSource`` ids, most precedent first."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class AlterConfigOp(enum.IntEnum):
    """Kafka's ``AlterConfigOp.OpType`` ids (IncrementalAlterConfigs)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class Synonym(NamedTuple):
    name: str
    value: str
    source: ConfigSource


class ConfigEntry(NamedTuple):
    """One described config: its value as Kafka prints it (None: not set), where it comes
    from, whether AlterConfigs may change it, and its synonyms."""

    name: str
    value: str
    source: ConfigSource
    read_only: bool
    synonyms: tuple
    sensitive: bool = False


#: Topic config -> its broker synonyms, most precedent first.
_TOPIC_BROKER_NAMES = {topic: tuple(name for name, _ in synonyms)
                       for topic, synonyms in TOPIC_SYNONYMS.items()}
#: Broker keys AlterConfigs may set, per broker or cluster-wide (see the module doc).
DYNAMIC_BROKER_KEYS = frozenset(names[0] for names in _TOPIC_BROKER_NAMES.values())
#: Keys whose values are lists, the only ones APPEND and SUBTRACT apply to.
LIST_KEYS = frozenset({"cleanup.policy", "log.cleanup.policy"})
_DEFAULTS = {name: key.default for name, key in BROKER_KEYS.items() if key.default is not None}


def config_string(value):
    """A typed config value as Kafka's ``ConfigDef.convertToString`` writes it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _dynamic(broker_configs, broker_id):
    """``(this broker's dynamic configs, the cluster-wide default ones)``."""
    return (broker_configs.get(str(broker_id), {}),
            broker_configs.get(CLUSTER_DEFAULT, {}))


def effective_broker_config(static, broker_configs, broker_id):
    """The BrokerConfig broker ``broker_id`` runs with: ``static`` (its server.properties)
    under the cluster-wide dynamic configs, under its own (see the module doc)."""
    own, default = _dynamic(broker_configs, broker_id)
    if not own and not default:
        return static
    return static.replace({**default, **own})


def _broker_synonyms(name):
    """Kafka's ``brokerSynonyms``: the broker keys that set the same thing, in order."""
    for names in _TOPIC_BROKER_NAMES.values():
        if name in names and len(names) > 1:
            return names
    return (name,)


def _synonyms(names, primary, layers):
    """Kafka's ``configSynonyms``: for each layer ``(source, {key: raw})`` in precedence
    order, the keys of ``names`` it sets; those before ``primary`` dropped."""
    found = [Synonym(name, config_string(BROKER_KEYS[name].parse(values[name])), source)
             for source, values in layers for name in names if values.get(name) is not None]
    while found and found[0].name != primary:
        found.pop(0)
    return tuple(found)


def _layers(static, broker_configs, broker_id):
    own, default = _dynamic(broker_configs, broker_id)
    return ((ConfigSource.DYNAMIC_BROKER_CONFIG, own),
            (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, default),
            (ConfigSource.STATIC_BROKER_CONFIG, static.props),
            (ConfigSource.DEFAULT_CONFIG, _DEFAULTS))


def describe_topic(static, broker_configs, broker_id, overrides):
    """The ConfigEntry of every topic config, sorted by name, for a topic with
    ``overrides`` on broker ``broker_id`` (whose server.properties are ``static``)."""
    effective = effective_broker_config(static, broker_configs, broker_id)
    values = effective.topic_config(overrides)
    layers = _layers(static, broker_configs, broker_id)
    entries = []
    for name in sorted(_TOPIC_BROKER_NAMES):
        value = config_string(values[name])
        names = _TOPIC_BROKER_NAMES[name]
        synonyms = _synonyms(names, names[0], layers)
        if name in overrides:
            synonyms = (Synonym(name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG),) + synonyms
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(name, value, source, False, synonyms))
    return entries


def describe_broker(static, broker_configs, broker_id, cluster_default=False):
    """The ConfigEntry list of broker ``broker_id`` (every key, sorted; ``static``: its
    server.properties), or with ``cluster_default`` of the cluster-wide dynamic configs
    alone (Kafka describes the ``<default>`` entity so)."""
    layers = _layers(static, broker_configs, broker_id)
    if cluster_default:
        names = sorted(broker_configs.get(CLUSTER_DEFAULT, {}))
        layers = layers[1:2]
        values = {name: BROKER_KEYS[name].parse(layers[0][1][name]) for name in names}
    else:
        names = sorted(BROKER_KEYS)
        values = effective_broker_config(static, broker_configs, broker_id)
    entries = []
    for name in names:
        synonyms = _synonyms(_broker_synonyms(name), name, layers)
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(name, config_string(values[name]), source,
                                   name not in DYNAMIC_BROKER_KEYS, synonyms))
    return entries


# -- altering -------------------------------------------------------------------------------

def broker_resource_id(name):
    """The broker id a BROKER resource names (None: the cluster-wide default), or
    INVALID_REQUEST naming it."""
    if name == CLUSTER_DEFAULT:
        return None
    try:
        return int(name)
    except ValueError:
        raise InvalidRequestError(
            f"Broker id must be an integer, but it is: {name!r}") from None


def plan_change(static, image, resource_type, name, ops, replace):
    """``{key: new value, or None to delete}`` for one AlterConfigs resource (``replace``:
    the legacy API, whose configs replace all the resource's dynamic ones) or one
    IncrementalAlterConfigs resource; ``ops`` are ``(key, AlterConfigOp, value)``.
    ``static``: the controller's BrokerConfig, the base the new values are checked on.
    Raises the Kafka error naming the bad key and value (the caller names the resource)."""
    keys = [key for key, _, _ in ops]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise InvalidRequestError(f"duplicate config keys {duplicates} in one request")
    if resource_type == ConfigResourceType.TOPIC:
        info = image.topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        current = dict(info.configs)
    elif resource_type == ConfigResourceType.BROKER:
        broker_resource_id(name)
        current = dict(image.broker_configs.get(name, {}))
    else:
        raise InvalidRequestError(
            f"resource type {resource_type} ({_type_name(resource_type)}) of resource "
            f"{name!r} is not supported: ringlog alters TOPIC (2) and BROKER (4) configs")
    changes = {key: None for key in current} if replace else {}
    for key, op, value in ops:
        changes[key] = _apply_op(key, op, value, current.get(key))
    new = {k: v for k, v in {**current, **changes}.items() if v is not None}
    if resource_type == ConfigResourceType.TOPIC:
        static.topic_config(new)  # InvalidConfigurationError naming the key and value
    else:
        _check_broker_keys({k: v for k, v in changes.items() if v is not None})
        _check_broker_values(static, image, name, new)
    return changes


def _apply_op(key, op, value, current):
    try:
        op = AlterConfigOp(op)
    except ValueError:
        raise InvalidRequestError(
            f"unknown config operation {op} for key {key!r} (known: "
            f"{', '.join(f'{o.name} {o.value}' for o in AlterConfigOp)})") from None
    if op == AlterConfigOp.DELETE:
        return None
    if value is None:
        raise InvalidRequestError(f"null value for config {key!r} with operation {op.name}")
    if op == AlterConfigOp.SET:
        return value
    if key not in LIST_KEYS:
        raise InvalidConfigurationError(
            f"config value {op.name.lower()} is not allowed for config key {key!r} (value "
            f"{value!r}): it is not a list")
    items = [i.strip() for i in (current or "").split(",") if i.strip()]
    given = [i.strip() for i in value.split(",") if i.strip()]
    if op == AlterConfigOp.APPEND:
        items += [i for i in given if i not in items]
    else:
        items = [i for i in items if i not in given]
    return ",".join(items) or None


def _check_broker_keys(values):
    for key, value in values.items():
        if key not in BROKER_KEYS:
            raise InvalidConfigurationError(f"unknown broker config {key!r} (value {value!r})")
        if key not in DYNAMIC_BROKER_KEYS:
            raise InvalidConfigurationError(
                f"cannot update broker config {key!r} (value {value!r}) dynamically: it is "
                f"read-only (set it in server.properties and restart); dynamic broker "
                f"configs: {', '.join(sorted(DYNAMIC_BROKER_KEYS))}")


def _check_broker_values(static, image, name, new):
    """Check ``new`` as resource ``name``'s dynamic configs on ``static``, with the other
    level (the cluster default, or a broker's own) as the image has it."""
    configs = dict(image.broker_configs)
    configs[name] = new
    broker_id = static["broker.id"] if name == CLUSTER_DEFAULT else int(name)
    effective_broker_config(static, configs, broker_id)  # InvalidConfigurationError


def _type_name(resource_type):
    try:
        return ConfigResourceType(resource_type).name
    except ValueError:
        return "unknown"

