"""``ringlog get-offsets``: the offsets of topic partitions, as kafka-get-offsets does.

::

    ringlog get-offsets --bootstrap-server D [--topic REGEX] [--partitions 0,1]
                        [--time -1|latest|-2|earliest|<ms>] [--exclude-internal-topics]
    ringlog get-offsets --bootstrap-server D --topic-partitions 'orders:0-3,logs,:1'

Kafka's GetOffsetShell: the partitions chosen are those of the topics ``--topic`` (a regular
expression over whole names, all topics without it) matches, narrowed to ``--partitions``;
or those ``--topic-partitions`` matches, a comma-separated list of ``TOPIC_REGEX[:PART]``
rules where PART is a number, ``N-M`` (M exclusive), ``N-`` or ``-M``. For each one a line
``topic:partition:offset``, sorted by ``topic-partition`` as a string: with ``--time
latest`` (-1, the default) the high watermark, with ``earliest`` (-2) the log start offset,
with a timestamp (ms) the first offset whose record's timestamp is at or after it — a
partition with no such record prints no line, as Kafka's tool does.
``max-timestamp`` (-3) and the tiered-storage specs (-4, -5, -6) need ListOffsets v7 or
later, which ringlog does not serve: they are refused by name.

A partition without a leader (its replicas' brokers stopped, say) is named at once on stderr,
Kafka's line with why: ``Skip getting offsets for topic-partition t:1 due to error: partition
t-1 has no leader: its only replica, broker 1, is stopped``; the other partitions' offsets are
printed as usual, and the tool exits 1 (a script sees the answer is partial; Kafka's tool
exits 0 there).

Errors go to stderr as ``Error occurred: ...`` with exit code 1. Topics and partitions come
from Metadata (the admin client, which ``--command-config`` configures); the offsets from
ListOffsets through ``KafkaConsumer.beginning_offsets`` / ``end_offsets`` /
``offsets_for_times``.
"""
from __future__ import annotations

import re
import sys

from cluster.admin.kafka_admin_client import KafkaAdminClient
from cluster.client.metadata import no_leader_reason
from cluster.errors import KafkaError
from cluster.structs import TopicPartition
from cluster.tools.support import (
    FAILED,
    ToolError,
    add_bootstrap_argument,
    client_properties,
    fail,
    setup_logging,
    topic_pattern,
)
from consumer_proc.consumer import KafkaConsumer

CLIENT_ID = "GetOffsetShell"
EARLIEST = -2
LATEST = -1
_NAMED_TIMES = {"latest": LATEST, "earliest": EARLIEST}
#: Kafka's specs that ListOffsets v5 cannot carry (KIP-734, KIP-1005, tiered storage).
_UNSERVED_TIMES = {"max-timestamp": -3, "earliest-local": -4, "latest-tiered": -5,
                   "earliest-pending-upload": -6}
#: Kafka's TOPIC_PARTITION_PATTERN.
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
_PREFIX = "Error occurred: "
#: Every partition id (Kafka's Integer.MAX_VALUE bound).
_ALL_PARTITIONS = range(2**31 - 1)


def add_arguments(parser):
    add_bootstrap_argument(parser)
    parser.add_argument("--topic-partitions", metavar="topic1:1,topic2:0-3,topic3,topic4:5-",
                        help="comma-separated topic-partition rules: a topic regular "
                             "expression, then optionally ':' and a partition, N-M (M "
                             "exclusive), N- or -M; not with --topic or --partitions")
    parser.add_argument("--topic", help="the topic, a regular expression (all topics when "
                                        "absent)")
    parser.add_argument("--partitions", metavar="IDS",
                        help="comma-separated partition ids (all when absent)")
    parser.add_argument("--time", default="latest",
                        help="<timestamp ms> / -1 or latest / -2 or earliest (default latest)")
    parser.add_argument("--command-config", metavar="FILE",
                        help="admin client properties file")
    parser.add_argument("--exclude-internal-topics", action="store_true",
                        help="leave internal topics out")


def run(args):
    setup_logging()
    try:
        if args.topic_partitions is not None and (args.topic is not None
                                                  or args.partitions is not None):
            raise ToolError("--topic-partitions cannot be used with --topic or --partitions")
        timestamp = parse_time(args.time)
        allowed = (parse_rules(args.topic_partitions) if args.topic_partitions is not None
                   else _topic_and_partitions(args.topic, args.partitions))
        props = client_properties(args.bootstrap_server, args.command_config)
        props["client.id"] = CLIENT_ID
        with KafkaAdminClient(**props) as admin:
            partitions, leaderless = _partitions(admin, allowed, args.exclude_internal_topics)
        if not partitions and not leaderless:
            raise ToolError("Could not match any topic-partitions with the specified filters")
        for tp in sorted(leaderless, key=_sort_key):
            reason = leaderless[tp]
            print(f"Skip getting offsets for topic-partition {tp.topic}:{tp.partition} due to "
                  f"error: {reason}", file=sys.stderr, flush=True)
        offsets = _offsets(props["bootstrap.servers"], partitions, timestamp) if partitions else {}
    except (ToolError, KafkaError) as exc:
        return fail(exc, _PREFIX)
    for tp in sorted(offsets, key=_sort_key):
        print(f"{tp.topic}:{tp.partition}:{offsets[tp]}")
    return FAILED if leaderless else 0


def _sort_key(tp):
    """Kafka's order of the tool's lines: ``topic-partition`` as a string."""
    return f"{tp.topic}-{tp.partition}"


def parse_time(raw):
    """Kafka's ``parseOffsetSpec``: LATEST, EARLIEST or a timestamp in ms."""
    if raw in _NAMED_TIMES:
        return _NAMED_TIMES[raw]
    try:
        value = int(raw)
    except ValueError:
        value = None
    if raw in _UNSERVED_TIMES or value in _UNSERVED_TIMES.values():
        raise ToolError(f"--time {raw}: needs ListOffsets v7 or later; ringlog serves "
                        f"ListOffsets up to v5 (use -1 or latest, -2 or earliest, or a "
                        f"timestamp)")
    if value is None or value < EARLIEST:
        raise ToolError(f"Malformed time argument {raw}. Please use -1 or latest / -2 or "
                        f"earliest, or a specified long format timestamp")
    return value


def parse_rules(raw):
    """``[(topic regex, partition ids)]`` from ``--topic-partitions`` (Kafka's
    ``createTopicPartitionFilterWithPatternList``); the ids are a range."""
    rules = []
    for spec in raw.split(","):
        match = _RULE.fullmatch(spec)
        if match is None:
            raise ToolError(f"Invalid rule specification: {spec}")
        topic, number, low, high = (group or None for group in match.groups())
        if number is not None:
            ids = range(int(number), int(number) + 1)
        else:
            ids = range(int(low) if low is not None else 0,
                        int(high) if high is not None else _ALL_PARTITIONS.stop)
        rules.append((topic_pattern(topic or ".*"), ids))
    return rules


def _topic_and_partitions(topic, partitions):
    if not partitions:
        ids = _ALL_PARTITIONS
    else:
        try:
            ids = {int(p) for p in partitions.split(",")}
        except ValueError:
            raise ToolError(f"--partitions expects a comma separated list of numeric "
                            f"partition ids, but received: {partitions}") from None
    return [(topic_pattern(topic or ".*"), ids)]


def _partitions(admin, rules, exclude_internal):
    """``([TopicPartition with a leader], {TopicPartition without one: why})`` of the
    partitions that some rule ``(topic regex, partition ids)`` allows."""
    topics = [t for t in admin.describe_topics()
              if not (exclude_internal and t["is_internal"])]
    chosen = [(t["name"], p) for t in topics for p in t["partitions"]
              if any(pattern.fullmatch(t["name"]) and p["partition_index"] in ids
                     for pattern, ids in rules)]
    led = [TopicPartition(name, p["partition_index"]) for name, p in chosen
           if p["leader_id"] >= 0]
    if len(led) == len(chosen):
        return led, {}
    live = {b["node_id"] for b in admin.describe_cluster()["brokers"]}
    return led, {TopicPartition(name, p["partition_index"]): no_leader_reason(
        name, p["partition_index"], p["replica_nodes"], p["isr_nodes"], p["offline_replicas"],
        live) for name, p in chosen if p["leader_id"] < 0}


def _offsets(bootstrap_servers, partitions, timestamp):
    """``{tp: offset}``, leaving out partitions without an offset for ``timestamp``."""
    with KafkaConsumer(bootstrap_servers=bootstrap_servers, client_id=CLIENT_ID) as consumer:
        if timestamp == LATEST:
            return consumer.end_offsets(partitions)
        if timestamp == EARLIEST:
            return consumer.beginning_offsets(partitions)
        found = consumer.offsets_for_times({tp: timestamp for tp in partitions})
        return {tp: value.offset for tp, value in found.items() if value is not None}
