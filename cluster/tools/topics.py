"""``ringlog topics``: create, list, describe, alter and delete topics, as kafka-topics does.

::

    ringlog topics --bootstrap-server D --create --topic T [--partitions P]
                   [--replication-factor R | --replica-assignment 0:1,1:2,...]
                   [--config k=v ...] [--if-not-exists]
    ringlog topics --bootstrap-server D --list [--topic REGEX] [--exclude-internal]
    ringlog topics --bootstrap-server D --describe [--topic REGEX] [--if-exists]
                   [--under-replicated-partitions | --unavailable-partitions
                    | --under-min-isr-partitions | --at-min-isr-partitions]
    ringlog topics --bootstrap-server D --alter --topic REGEX --partitions P [--if-exists]
    ringlog topics --bootstrap-server D --delete --topic REGEX [--if-exists]

Kafka's output: ``Created topic T.``; ``--list`` prints the names, sorted; ``--describe``
prints per topic ``Topic: T<TAB>TopicId: ..<TAB>PartitionCount: ..<TAB>ReplicationFactor:
..<TAB>Configs: k=v,..`` (the topic's own overrides) then one line per partition,
``<TAB>Topic: T<TAB>Partition: 0<TAB>Leader: 1<TAB>Replicas: 1,2,3<TAB>Isr: 1,2``
(``Leader: none`` while offline) — Kafka 3.6's form, plus ``<TAB>Elr: 2,3`` (KIP-966's
eligible leader replicas, as Kafka 3.7 prints them) and ``<TAB>Damaged: 1`` (replicas
healing from a damaged log: not eligible to lead, out of the ISR, until they caught up)
when the partition has any; no ``LastKnownElr``. A report option makes ``--describe``
print only the partitions it picks, without the topic lines, as kafka-topics does:
``--under-replicated-partitions`` (ISR smaller than the replicas),
``--unavailable-partitions`` (no leader, or a leader that is not alive),
``--under-min-isr-partitions`` (no leader, or ISR smaller than the topic's
``min.insync.replicas``), ``--at-min-isr-partitions`` (ISR exactly that size); one at a
time. ``--alter`` and ``--delete`` print nothing. Except with ``--create``, ``--topic`` is
Kafka's include list: a regular expression matched against whole names.

Errors go to stderr, with exit code 1: the broker's error for the topic (``Error while
executing topic command : [Error 36] TopicAlreadyExistsError: topic 'T': ...``), or
Kafka's own checks (``Topic 'T' does not exist as expected``, ``The partitions must be
greater than 0``, ...). ``--command-config`` reads admin client properties from a file.

Partitions and leaders come from Metadata requests (the admin client), the ``Configs``
from DescribeConfigs (those not at Kafka's default, as kafka-topics shows them: the topic's
overrides and what the brokers' configs set); the topic id, which Metadata v8 does not
carry, is read from the cluster's metadata page.
"""
from __future__ import annotations

import re
import sys

from cluster.admin.kafka_admin_client import (
    ConfigResource,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
)
from cluster.client.kafka_client import locate_cluster
from cluster.config.dynamic import ConfigResourceType, ConfigSource
from cluster.errors import KafkaError, TopicAlreadyExistsError
from cluster.metadata import data_dir as dd
from cluster.metadata.page import MetadataPage
from cluster.tools.support import (
    ToolError,
    add_bootstrap_argument,
    client_properties,
    fail,
    setup_logging,
    topic_pattern,
)

ACTIONS = ("create", "list", "describe", "alter", "delete")

#: option -> the actions it may be used with (Kafka's checkInvalidArgs).
_ALLOWED = {
    "partitions": ("create", "alter"),
    "replication_factor": ("create",),
    "replica_assignment": ("create",),
    "config": ("create",),
    "if_not_exists": ("create",),
    "if_exists": ("alter", "delete", "describe"),
    "exclude_internal": ("list", "describe"),
    "under_replicated_partitions": ("describe",),
    "unavailable_partitions": ("describe",),
    "under_min_isr_partitions": ("describe",),
    "at_min_isr_partitions": ("describe",),
}
#: --describe's report options, which Kafka allows one at a time.
_REPORTS = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions",
            "at_min_isr_partitions")
_MAX_REPLICATION_FACTOR = 2**15 - 1
_ERROR_PREFIX = "Error while executing topic command : "


def add_arguments(parser):
    add_bootstrap_argument(parser)
    parser.add_argument("--command-config", metavar="FILE",
                        help="admin client properties file")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--create", action="store_true", help="create a new topic")
    actions.add_argument("--list", action="store_true", help="list the topics")
    actions.add_argument("--describe", action="store_true",
                         help="describe topics: partitions, leader, replicas, isr")
    actions.add_argument("--alter", action="store_true",
                         help="raise the number of partitions of a topic")
    actions.add_argument("--delete", action="store_true", help="delete topics")
    parser.add_argument("--topic", help="the topic; except with --create, a regular "
                                        "expression of topic names")
    parser.add_argument("--partitions", type=int,
                        help="number of partitions (--create: default the broker's "
                             "num.partitions; --alter: the new count)")
    parser.add_argument("--replication-factor", type=int,
                        help="replicas per partition (default the broker's "
                             "default.replication.factor)")
    parser.add_argument("--replica-assignment", metavar="B1:B2,B3:B4,...",
                        help="broker ids of each partition's replicas, partitions separated "
                             "by commas")
    parser.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                        help="a topic config override for --create (repeatable)")
    parser.add_argument("--if-not-exists", action="store_true",
                        help="--create does not fail when the topic exists")
    parser.add_argument("--if-exists", action="store_true",
                        help="--alter, --delete, --describe do nothing when no topic matches")
    parser.add_argument("--exclude-internal", action="store_true",
                        help="leave internal topics out of --list and --describe")
    parser.add_argument("--under-replicated-partitions", action="store_true",
                        help="--describe only the partitions whose ISR is smaller than "
                             "their replicas")
    parser.add_argument("--unavailable-partitions", action="store_true",
                        help="--describe only the partitions whose leader is not available")
    parser.add_argument("--under-min-isr-partitions", action="store_true",
                        help="--describe only the partitions whose ISR is smaller than "
                             "min.insync.replicas")
    parser.add_argument("--at-min-isr-partitions", action="store_true",
                        help="--describe only the partitions whose ISR is exactly "
                             "min.insync.replicas")


def run(args):
    setup_logging()
    action = next(name for name in ACTIONS if getattr(args, name))
    try:
        _check_options(args, action)
        props = client_properties(args.bootstrap_server, args.command_config)
    except ToolError as exc:
        return fail(exc)
    try:
        with KafkaAdminClient(**props) as admin:
            return _ACTIONS[action](admin, args)
    except ToolError as exc:
        return fail(exc)
    except KafkaError as exc:
        return fail(exc, _ERROR_PREFIX)


def _check_options(args, action):
    for option, actions in _ALLOWED.items():
        if getattr(args, option) not in (None, False, []) and action not in actions:
            raise ToolError(f"Option --{option.replace('_', '-')} can't be used with option "
                            f"--{action}")
    reports = [name for name in _REPORTS if getattr(args, name)]
    if len(reports) > 1:
        raise ToolError(f"Option --{reports[0].replace('_', '-')} can't be used with option "
                        f"--{reports[1].replace('_', '-')}")
    if action not in ("list", "describe") and not args.topic:
        raise ToolError(f"Missing required argument --topic (for --{action})")
    if action == "alter" and args.partitions is None:
        raise ToolError("Missing required argument --partitions (for --alter)")
    if args.replica_assignment and (args.partitions is not None
                                    or args.replication_factor is not None):
        raise ToolError("Option --replica-assignment can't be used with options --partitions "
                        "and --replication-factor")
    if args.replication_factor is not None and not (
            1 <= args.replication_factor <= _MAX_REPLICATION_FACTOR):
        raise ToolError(f"The replication factor must be between 1 and "
                        f"{_MAX_REPLICATION_FACTOR} inclusive, found {args.replication_factor}")
    if args.partitions is not None and args.partitions < 1:
        raise ToolError(f"The partitions must be greater than 0, found {args.partitions}")


# -- actions ---------------------------------------------------------------------------------

def _create(admin, args):
    name = args.topic
    if "." in name or "_" in name:
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or "
              "underscore ('_') could collide. To avoid issues it is best to use either, "
              "but not both.", file=sys.stderr)
    topic = NewTopic(name, -1 if args.partitions is None else args.partitions,
                     -1 if args.replication_factor is None else args.replication_factor,
                     replica_assignments=_replica_assignment(args.replica_assignment),
                     topic_configs=_topic_configs(args.config))
    try:
        admin.create_topics([topic])
    except TopicAlreadyExistsError:
        if not args.if_not_exists:
            raise
        return 0
    print(f"Created topic {name}.")
    return 0


def _list(admin, args):
    for name in _topics(admin, args):
        print(name)
    return 0


def _describe(admin, args):
    names = _existing_topics(admin, args)
    if not names:
        return 0
    described = admin.describe_topics(names)
    image = _metadata_image(admin)
    report = next((name for name in _REPORTS if getattr(args, name)), None)
    live = {broker["node_id"] for broker in admin.describe_cluster()["brokers"]}
    out = []
    for topic in sorted(described, key=lambda t: t["name"]):
        name, partitions = topic["name"], topic["partitions"]
        configs = _configs(admin, name)
        if report is None:
            out.append(_topic_line(name, partitions, image, _overrides(configs)))
        min_isr = int(next((c["value"] for c in configs
                            if c["name"] == "min.insync.replicas"), 1))
        for p in partitions:
            if report is not None and not _REPORTED[report](p, live, min_isr):
                continue
            leader = p["leader_id"] if p["leader_id"] >= 0 else "none"
            out.append(f"\tTopic: {name}\tPartition: {p['partition_index']}\tLeader: {leader}"
                       f"\tReplicas: {_ids(p['replica_nodes'])}\tIsr: {_ids(p['isr_nodes'])}"
                       + _healing(image, name, p['partition_index']))
    if out:
        print("\n".join(out))
    return 0


def _alter(admin, args):
    names = _existing_topics(admin, args)
    if names:
        admin.create_partitions({name: NewPartitions(args.partitions) for name in names})
    return 0


def _delete(admin, args):
    names = _existing_topics(admin, args)
    if names:
        admin.delete_topics(names)
    return 0


_ACTIONS = {"create": _create, "list": _list, "describe": _describe, "alter": _alter,
            "delete": _delete}


# -- helpers ---------------------------------------------------------------------------------

def _topics(admin, args):
    """The topic names ``--topic`` matches (all without it), sorted; internal ones left out
    under ``--exclude-internal``."""
    if args.exclude_internal:
        names = [t["name"] for t in admin.describe_topics() if not t["is_internal"]]
    else:
        names = admin.list_topics()
    if args.topic:
        pattern = topic_pattern(args.topic)
        names = [name for name in names if pattern.fullmatch(name)]
    return sorted(names)


def _existing_topics(admin, args):
    names = _topics(admin, args)
    if args.topic and not names and not args.if_exists:
        raise ToolError(f"Topic '{args.topic}' does not exist as expected")
    return names


def _configs(admin, name):
    """The topic's configs (DescribeConfigs entries)."""
    (result,) = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    return result["configs"]


def _overrides(configs):
    """``k=v,...`` of the configs that are not at Kafka's default, sorted."""
    return ",".join(f"{c['name']}={c['value']}" for c in sorted(
        configs, key=lambda c: c["name"])
        if c["config_source"] != ConfigSource.DEFAULT_CONFIG)


#: report option -> whether a partition (describe_topics'), given the live broker ids and
#: the topic's min.insync.replicas, is one it prints (Kafka's PartitionDescription).
_REPORTED = {
    "under_replicated_partitions":
        lambda p, live, min_isr: len(p["isr_nodes"]) < len(p["replica_nodes"]),
    "unavailable_partitions":
        lambda p, live, min_isr: p["leader_id"] < 0 or p["leader_id"] not in live,
    "under_min_isr_partitions":
        lambda p, live, min_isr: p["leader_id"] < 0 or len(p["isr_nodes"]) < min_isr,
    "at_min_isr_partitions": lambda p, live, min_isr: len(p["isr_nodes"]) == min_isr,
}


def _topic_line(name, partitions, image, configs):
    info = image.topics.get(name) if image is not None else None
    topic_id = f"\tTopicId: {info.topic_id}" if info is not None else ""
    factor = len(partitions[0]["replica_nodes"]) if partitions else 0
    return (f"Topic: {name}{topic_id}\tPartitionCount: {len(partitions)}"
            f"\tReplicationFactor: {factor}\tConfigs: {configs}")


def _healing(image, name, index):
    """``\tElr: ..`` (KIP-966's eligible leader replicas) and ``\tDamaged: ..`` (replicas
    healing from a damaged log, ``replica_proc.damaged_replicas``) when there are any."""
    state = image.partition(name, index) if image is not None else None
    if state is None:
        return ""
    return ((f"\tElr: {_ids(state.elr)}" if state.elr else "")
            + (f"\tDamaged: {_ids(state.damaged)}" if state.damaged else ""))


def _metadata_image(admin):
    """The newest MetadataImage from the cluster's metadata page, or None if it cannot be
    read (the describe then leaves out topic ids)."""
    try:
        data_dir, cluster_id = locate_cluster(admin.config["bootstrap_servers"])
        page = MetadataPage.open(dd.read_shm_namespace(data_dir, cluster_id))
    except (OSError, ValueError, KafkaError):
        return None
    try:
        return page.read()
    finally:
        page.close()


def _ids(ids):
    return ",".join(map(str, ids))


def _topic_configs(pairs):
    """Kafka's parse of ``--config`` pairs: ``name=value`` with spaces around ``=`` allowed."""
    configs = {}
    for pair in pairs:
        parts = re.split(r"\s*=\s*", pair)
        if len(parts) != 2:
            raise ToolError(f"requirement failed: Invalid topic config: all configs to be "
                            f"added must be in the format \"key=val\", found {pair!r}.")
        configs[parts[0].strip()] = parts[1].strip()
    return configs


def _replica_assignment(raw):
    """``{partition: [broker ids]}`` from ``"0:1,1:2"`` (Kafka's parseReplicaAssignment)."""
    if not raw:
        return None
    assignment = {}
    for partition, replicas in enumerate(raw.split(",")):
        try:
            brokers = [int(b.strip()) for b in replicas.split(":")]
        except ValueError:
            raise ToolError(f"--replica-assignment {raw!r}: partition {partition} has a "
                            f"broker id that is not an integer: {replicas!r}") from None
        duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
        if duplicates:
            raise ToolError(f"Partition replica lists may not contain duplicate entries: "
                            f"{','.join(map(str, duplicates))}")
        if assignment and len(brokers) != len(assignment[0]):
            raise ToolError(f"Partition {partition} has different replication factor: "
                            f"{brokers}")
        assignment[partition] = brokers
    return assignment

