"""``ringlog configs``: describe and alter topic and broker configs, as kafka-configs does.

::

    ringlog configs --bootstrap-server D --entity-type topics|brokers
                    [--entity-name X | --entity-default] --describe [--all]
    ringlog configs --bootstrap-server D --entity-type topics|brokers
                    (--entity-name X | --entity-default) --alter
                    [--add-config k1=v1,k2=[a,b]] [--delete-config k1,k2]

``--topic T``, ``--broker B`` and ``--broker-defaults`` are Kafka's shorthands for the
entity options. ``--describe`` prints per entity ``Dynamic configs for topic T are:`` (``All
configs`` with ``--all``; ``broker B``; ``Default configs for brokers in the cluster are:``)
then one line per config, sorted: ``  key=value sensitive=false synonyms={SOURCE:name=value,
...}``; without ``--all`` only the entity's own dynamic configs. Without ``--entity-name``
every topic, or every broker and the cluster default, is described. ``--alter`` changes
only the keys given (IncrementalAlterConfigs) and prints ``Completed updating config for
topic T.`` (``default config for brokers in the cluster``); a ``--delete-config`` key the
entity does not have fails with ``Invalid config(s): k``, as Kafka's tool checks.

Errors go to stderr with exit code 1, one line: ``Error while executing config command :
InvalidConfigurationError: [Error 40] topic 'T': invalid value 'x' for topic config
'retention.ms': ...`` — the broker's code and message, naming the key and the value.
"""
from __future__ import annotations

import re

from cluster.admin.kafka_admin_client import ConfigResource, KafkaAdminClient
from cluster.config.dynamic import AlterConfigOp, ConfigResourceType, ConfigSource
from cluster.errors import InvalidConfigurationError, KafkaError
from cluster.tools.support import (
    ToolError,
    add_bootstrap_argument,
    client_properties,
    fail,
    setup_logging,
)

ENTITY_TYPES = {"topics": ConfigResourceType.TOPIC, "brokers": ConfigResourceType.BROKER}
_SINGULAR = {"topics": "topic", "brokers": "broker"}
#: What describe shows without --all: the entity's own dynamic configs.
_OWN_SOURCE = {"topics": ConfigSource.DYNAMIC_TOPIC_CONFIG,
               "brokers": ConfigSource.DYNAMIC_BROKER_CONFIG}
#: Kafka's split of --add-config: commas and '=' outside [...] separate.
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"
_ERROR_PREFIX = "Error while executing config command : "


def add_arguments(parser):
    add_bootstrap_argument(parser)
    parser.add_argument("--command-config", metavar="FILE",
                        help="admin client properties file")
    parser.add_argument("--entity-type", choices=sorted(ENTITY_TYPES),
                        help="the type of entity")
    parser.add_argument("--entity-name", help="the topic name or broker id")
    parser.add_argument("--entity-default", action="store_true",
                        help="the cluster-wide default of brokers")
    parser.add_argument("--topic", help="shorthand for --entity-type topics --entity-name T")
    parser.add_argument("--broker", help="shorthand for --entity-type brokers --entity-name B")
    parser.add_argument("--broker-defaults", action="store_true",
                        help="shorthand for --entity-type brokers --entity-default")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--describe", action="store_true", help="list configs")
    actions.add_argument("--alter", action="store_true", help="alter configs")
    parser.add_argument("--all", action="store_true",
                        help="--describe every config, not only the dynamic ones")
    parser.add_argument("--add-config", metavar="k1=v1,k2=[v1,v2]",
                        help="configs to set, comma-separated; list values in brackets")
    parser.add_argument("--delete-config", metavar="k1,k2",
                        help="configs to remove, comma-separated")


def run(args):
    setup_logging()
    try:
        entity_type, names = _entity(args)
        _check_options(args, entity_type, names)
        props = client_properties(args.bootstrap_server, args.command_config)
    except ToolError as exc:
        return fail(exc)
    try:
        with KafkaAdminClient(**props) as admin:
            if args.describe:
                return _describe(admin, args, entity_type, names)
            return _alter(admin, args, entity_type, names[0])
    except ToolError as exc:
        return fail(exc)
    except KafkaError as exc:
        return fail(exc, _ERROR_PREFIX)


def _entity(args):
    """``(entity type, [names] or None for all)`` from the entity options and shorthands."""
    given = [("topics", [args.topic]) if args.topic is not None else None,
             ("brokers", [args.broker]) if args.broker is not None else None,
             ("brokers", [""]) if args.broker_defaults else None]
    given = [g for g in given if g is not None]
    if args.entity_type is not None:
        if args.entity_name is not None and args.entity_default:
            raise ToolError("--entity-name and --entity-default cannot be used together")
        names = ([args.entity_name] if args.entity_name is not None else
                 [""] if args.entity_default else None)
        given.append((args.entity_type, names))
    elif args.entity_name is not None or args.entity_default:
        raise ToolError("--entity-type must be specified with --entity-name or "
                        "--entity-default")
    if len(given) != 1:
        raise ToolError("exactly one entity must be given: --entity-type (with "
                        "--entity-name or --entity-default), --topic, --broker or "
                        "--broker-defaults")
    entity_type, names = given[0]
    if entity_type == "topics" and names == [""]:
        raise ToolError("--entity-default applies to brokers only")
    return given[0]


def _check_options(args, entity_type, names):
    if args.alter:
        if names is None:
            raise ToolError("an entity name must be specified with --alter: --entity-name "
                            "or --entity-default")
        if not args.add_config and not args.delete_config:
            raise ToolError("At least one of --add-config or --delete-config must be "
                            "specified with --alter")
    elif args.add_config or args.delete_config:
        raise ToolError("--add-config and --delete-config can only be used with --alter")
    if args.all and not args.describe:
        raise ToolError("--all can only be used with --describe")
    if entity_type == "brokers" and names and names[0]:
        try:
            int(names[0])
        except ValueError:
            raise ToolError(f"The entity name for brokers must be a valid integer broker id, "
                            f"but it is: {names[0]}") from None


# -- describe --------------------------------------------------------------------------------

def _describe(admin, args, entity_type, names):
    if names is None:
        names = (sorted(admin.list_topics()) if entity_type == "topics" else
                 [str(b["node_id"]) for b in admin.describe_cluster()["brokers"]] + [""])
    out = []
    for name in names:
        resource = ConfigResource(ENTITY_TYPES[entity_type], name)
        (result,) = admin.describe_configs([resource], include_synonyms=True)
        if name == "":
            out.append("Default configs for brokers in the cluster are:")
            own = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        else:
            out.append(f"{'All' if args.all else 'Dynamic'} configs for "
                       f"{_SINGULAR[entity_type]} {name} are:")
            own = _OWN_SOURCE[entity_type]
        for entry in sorted(result["configs"], key=lambda e: e["name"]):
            if args.all or entry["config_source"] == own:
                out.append("  " + config_line(entry))
    print("\n".join(out))
    return 0


def config_line(entry):
    """Kafka's line for one described config (without the indent)."""
    synonyms = ", ".join(f"{ConfigSource(s['source']).name}:{s['name']}={s['value']}"
                         for s in entry["synonyms"])
    value = "null" if entry["is_sensitive"] or entry["value"] is None else entry["value"]
    return (f"{entry['name']}={value} sensitive={str(entry['is_sensitive']).lower()} "
            f"synonyms={{{synonyms}}}")


# -- alter -----------------------------------------------------------------------------------

def _alter(admin, args, entity_type, name):
    added = parse_add_config(args.add_config) if args.add_config else {}
    deleted = [key.strip() for key in (args.delete_config or "").split(",") if key.strip()]
    resource_type = ENTITY_TYPES[entity_type]
    (current,) = admin.describe_configs([ConfigResource(resource_type, name)])
    own = (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG if name == "" else
           _OWN_SOURCE[entity_type])
    present = {e["name"] for e in current["configs"] if e["config_source"] == own}
    missing = [key for key in deleted if key not in present]
    if missing:
        raise InvalidConfigurationError(f"Invalid config(s): {','.join(missing)}")
    changes = {key: (AlterConfigOp.SET, value) for key, value in added.items()}
    changes.update({key: (AlterConfigOp.DELETE, None) for key in deleted})
    admin.incremental_alter_configs([ConfigResource(resource_type, name, changes)])
    if name == "":
        print(f"Completed updating default config for {entity_type} in the cluster.")
    else:
        print(f"Completed updating config for {_SINGULAR[entity_type]} {name}.")
    return 0


def parse_add_config(raw):
    """``{key: value}`` from ``--add-config`` (Kafka's ``parseConfigsToBeAdded``):
    ``k1=v1,k2=[a,b]`` gives ``{"k1": "v1", "k2": "a,b"}``."""
    configs = {}
    for pair in re.split("," + _OUTSIDE_BRACKETS, raw):
        parts = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, pair)
        if len(parts) != 2 or not parts[0].strip():
            raise ToolError(f"requirement failed: Invalid entity config: all configs to be "
                            f"added must be in the format \"key=val\", found {pair!r}.")
        configs[parts[0].strip()] = re.sub(r"[\[\]]", "", parts[1]).strip()
    return configs
