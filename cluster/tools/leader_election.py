"""``ringlog leader-election``: preferred or unclean leader elections, as
kafka-leader-election does.

::

    ringlog leader-election --bootstrap-server D --election-type PREFERRED|UNCLEAN
                            (--topic T --partition N | --all-topic-partitions
                             | --path-to-json-file F) [--admin.config FILE]

The partitions: one (``--topic`` and ``--partition``), every partition of the cluster
(``--all-topic-partitions``: the controller leaves out those that need no election), or
those of a JSON file in Kafka's format, ``{"partitions": [{"topic": "t", "partition":
0}, ...]}``. PREFERRED moves leadership back to each partition's first replica if it is
alive and in the ISR; UNCLEAN elects a leader for a partition that has none, from outside
the ISR if no ISR member is alive (records may be lost). Either goes to the controller as an
ElectLeaders request (``KafkaAdminClient.perform_leader_election``).

Kafka's output, partitions as ``topic-partition`` (sorted here; Kafka's order is a hash
set's): ``Successfully completed leader election (PREFERRED) for partitions t-0, t-2``,
``Valid replica already elected for partitions t-1`` (ELECTION_NOT_NEEDED), and for each
failure ``Error completing leader election (PREFERRED) for partition: t-3:
PreferredLeaderNotAvailableError: ...``; failures end with ``N replica(s) could not be
elected`` on stderr and exit code 1, as do bad options and a bad JSON file.
"""
from __future__ import annotations

import json

from cluster.admin.kafka_admin_client import KafkaAdminClient
from cluster.errors import ElectionNotNeededError, KafkaError, for_code
from cluster.protocol.frames import ElectionType
from cluster.tools.support import (
    ToolError,
    add_bootstrap_argument,
    client_properties,
    fail,
    setup_logging,
)


def add_arguments(parser):
    add_bootstrap_argument(parser)
    parser.add_argument("--admin.config", "--command-config", dest="admin_config",
                        metavar="FILE", help="admin client properties file")
    parser.add_argument("--election-type", metavar="PREFERRED|UNCLEAN",
                        help="preferred: the first replica leads again if it is in sync; "
                             "unclean: a leaderless partition gets a leader, from outside "
                             "the ISR if need be. REQUIRED.")
    parser.add_argument("--topic", help="the topic of --partition")
    parser.add_argument("--partition", type=int, help="the partition of --topic")
    parser.add_argument("--all-topic-partitions", action="store_true",
                        help="every partition of the cluster")
    parser.add_argument("--path-to-json-file", metavar="FILE",
                        help='partitions as {"partitions": [{"topic": "t", "partition": 0}]}')


def run(args):
    setup_logging()
    try:
        election_type, partitions = _check_options(args)
        props = client_properties(args.bootstrap_server, args.admin_config)
        with KafkaAdminClient(**props) as admin:
            result = admin.perform_leader_election(election_type, partitions,
                                                   raise_errors=False)
        if result["error_code"]:
            raise for_code(result["error_code"])(
                f"ElectLeaders ({election_type.name}) failed")
    except (ToolError, KafkaError) as exc:
        return fail(exc)
    return _report(election_type, result)


def _check_options(args):
    """``(ElectionType, {topic: [partitions]} or None)`` from the options, or ToolError
    with Kafka's message (LeaderElectionCommandOptions)."""
    if args.election_type is None:
        raise ToolError("Missing required option(s): election-type")
    try:
        election_type = ElectionType[args.election_type.strip().upper()]
    except KeyError:
        raise ToolError(f"--election-type {args.election_type}: Expected one of PREFERRED "
                        f"or UNCLEAN") from None
    chosen = [args.topic is not None, args.all_topic_partitions,
              args.path_to_json_file is not None]
    if chosen.count(True) != 1:
        raise ToolError("One and only one of the following options is required: topic, "
                        "all-topic-partitions, path-to-json-file")
    if args.topic is not None and args.partition is None:
        raise ToolError("Missing required option(s): partition")
    if args.topic is None and args.partition is not None:
        raise ToolError("Option partition is only allowed if topic is used")
    if args.all_topic_partitions:
        return election_type, None
    if args.topic is not None:
        return election_type, {args.topic: [args.partition]}
    return election_type, read_partitions(args.path_to_json_file)


def read_partitions(path):
    """``{topic: [partitions]}`` from Kafka's election JSON file, in file order."""
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except OSError as exc:
        raise ToolError(f"cannot read {path!r}: {exc.strerror}") from None
    except ValueError as exc:
        raise ToolError(f"{path!r} is not JSON: {exc}") from None
    if not isinstance(data, dict) or "partitions" not in data:
        raise ToolError('Replica election data is missing "partitions" field')
    entries = data["partitions"]
    if not isinstance(entries, list):
        raise ToolError(f'Replica election data: "partitions" must be a list, found '
                        f"{entries!r}")
    partitions = {}
    seen, duplicates = set(), []
    for entry in entries:
        if not (isinstance(entry, dict) and isinstance(entry.get("topic"), str)
                and type(entry.get("partition")) is int):
            raise ToolError(f'Replica election data: each partition must be {{"topic": '
                            f'<string>, "partition": <int>}}, found {entry!r}')
        key = (entry["topic"], entry["partition"])
        if key in seen:
            duplicates.append(f"{key[0]}-{key[1]}")
        seen.add(key)
        partitions.setdefault(key[0], []).append(key[1])
    if duplicates:
        raise ToolError(f"Replica election data contains duplicate partitions: "
                        f"{', '.join(duplicates)}")
    return partitions


def _report(election_type, result):
    """Print Kafka's lines for ``result`` (perform_leader_election's); the exit code."""
    succeeded, noop, failed = [], [], []
    for topic in result["replica_election_results"]:
        for p in topic["partition_result"]:
            key = (topic["topic"], p["partition_id"])
            if not p["error_code"]:
                succeeded.append(key)
            elif p["error_code"] == ElectionNotNeededError.errno:
                noop.append(key)
            else:
                failed.append((key, p))
    if succeeded:
        print(f"Successfully completed leader election ({election_type.name}) for "
              f"partitions {_names(succeeded)}")
    if noop:
        print(f"Valid replica already elected for partitions {_names(noop)}")
    if not failed:
        return 0
    for key, p in sorted(failed, key=lambda item: item[0]):
        error = for_code(p["error_code"])
        print(f"Error completing leader election ({election_type.name}) for partition: "
              f"{key[0]}-{key[1]}: {error.__name__}: "
              f"{p['error_message'] or error.description}")
    return fail(ToolError(f"{len(failed)} replica(s) could not be elected"))


def _names(keys):
    return ", ".join(f"{topic}-{partition}" for topic, partition in sorted(keys))
