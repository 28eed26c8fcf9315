"""``ringlog transactions``: Kafka's ``kafka-transactions.sh`` (``TransactionsCommand``) —
list the transactional ids the coordinators hold, describe one, describe the active
producers of a partition, find hanging transactions and abort one.

::

    ringlog transactions --bootstrap-server DATA_DIR list [--state-filters Ongoing ...]
                                                          [--duration-filter MS]
    ringlog transactions --bootstrap-server DATA_DIR describe --transactional-id ID
    ringlog transactions --bootstrap-server DATA_DIR describe-producers --topic T
                                                          --partition N [--broker-id B]
    ringlog transactions --bootstrap-server DATA_DIR find-hanging (--topic T [--partition N]
                                  | --broker-id B) [--max-transaction-timeout MINUTES]
    ringlog transactions --bootstrap-server DATA_DIR abort --topic T --partition N
                                  (--start-offset O | --producer-id P --producer-epoch E
                                   --coordinator-epoch C)

Kafka's flags, subcommands and tables: the columns Kafka's tool prints, each padded to its
widest cell and followed by a tab; ``None`` where Kafka prints it (no transaction, no
open transaction). ``list`` asks every broker (each coordinates its own
``__transaction_state`` partitions), ``describe`` the id's coordinator,
``describe-producers`` the partition's leader (or ``--broker-id``'s replica). ``list
--state-filters`` is ringlog's addition (Java's ``ListTransactionsOptions.filterStates``,
which Kafka's tool does not expose); a name Kafka does not know fails the tool, naming it.

``find-hanging`` is Kafka's search for hanging transactions: the partitions of the topic
(or hosted by the broker; every topic but the internal ones), their producers with a
transaction open longer than ``--max-transaction-timeout`` minutes (default 15) by their
last timestamp, then those whose producer id no coordinator lists (ListTransactions),
whose transactional id is not found, or whose coordinator does not count the partition
in the transaction (DescribeTransactions). ``abort`` writes an ABORT marker for such a
transaction (``KafkaAdminClient.abort_transaction``), identified by its first offset
(``--start-offset``: the producer, epoch and coordinator epoch come from
DescribeProducers) or by producer id, epoch and coordinator epoch (a negative coordinator
epoch counts as 0, as in Kafka); it prints nothing when done.

A failure prints Kafka's ``Failed to ...: <error>. Enable debug logging for additional
detail.`` (or Kafka's message for bad arguments) to stderr and exits 1: an unknown
transactional id (TransactionalIdNotFoundError), a topic or partition that does not exist
(UnknownTopicOrPartitionError), no open transaction at ``--start-offset``, a data
directory with no cluster running.

Runs in the calling thread (it owns its KafkaAdminClient).
"""
from __future__ import annotations

import sys
import time

from cluster.admin.kafka_admin_client import TRANSACTION_STATES, KafkaAdminClient
from cluster.errors import KafkaError, TransactionalIdNotFoundError
from cluster.structs import TopicPartition
from cluster.tools.support import (
    FAILED,
    ToolError,
    add_bootstrap_argument,
    client_properties,
    describe,
    setup_logging,
)

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                    "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                    "TransactionDurationMs", "TopicPartitions")
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                   "StartOffset", "LastTimestamp", "Duration(min)")
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                     "LastTimestamp", "CurrentTransactionStartOffset")
#: find-hanging's default ``--max-transaction-timeout``, in minutes (Kafka's).
MAX_TRANSACTION_TIMEOUT_MIN = 15


class _Failed(Exception):
    """The command failed; its text is Kafka's ``Failed to ...`` line (or argument
    message), printed to stderr."""


def add_arguments(parser):
    add_bootstrap_argument(parser)
    parser.add_argument("--command-config", metavar="FILE",
                        help="property file containing configs to be passed to admin client")
    commands = parser.add_subparsers(dest="transactions_command", metavar="COMMAND",
                                     required=True, title="commands")
    listing = commands.add_parser("list", help="list transactions")
    listing.add_argument("--duration-filter", type=int, metavar="MS",
                         help="only transactions running longer than this many ms")
    listing.add_argument("--state-filters", nargs="+", metavar="STATE",
                         help=f"only transactions in these states (ringlog's addition): "
                              f"{', '.join(TRANSACTION_STATES)}")
    describing = commands.add_parser("describe",
                                     help="describe the state of an active transactional-id")
    describing.add_argument("--transactional-id", required=True, help="transactional id")
    producers = commands.add_parser(
        "describe-producers", help="describe the states of active producers for a topic "
                                   "partition")
    producers.add_argument("--broker-id", type=int,
                           help="optional broker id to describe the producer state on a "
                                "specific replica")
    producers.add_argument("--topic", required=True, help="topic name")
    producers.add_argument("--partition", type=int, required=True, help="partition number")
    abort = commands.add_parser("abort", help="abort a hanging transaction (requires "
                                              "administrative privileges)")
    abort.add_argument("--topic", required=True, help="topic name")
    abort.add_argument("--partition", type=int, required=True, help="partition number")
    abort.add_argument("--start-offset", type=int,
                       help="start offset of the transaction to abort")
    abort.add_argument("--producer-id", type=int, help="producer id")
    abort.add_argument("--producer-epoch", type=int, help="producer epoch")
    abort.add_argument("--coordinator-epoch", type=int, help="coordinator epoch")
    hanging = commands.add_parser("find-hanging", help="find hanging transactions")
    hanging.add_argument("--broker-id", type=int,
                         help="broker id to search for hanging transactions")
    hanging.add_argument("--max-transaction-timeout", type=int,
                         default=MAX_TRANSACTION_TIMEOUT_MIN, metavar="MINUTES",
                         help="maximum transaction timeout in minutes to limit the scope of "
                              "the search")
    hanging.add_argument("--topic", help="topic name to limit search to")
    hanging.add_argument("--partition", type=int, help="partition number")


def run(args, out=None, clock_ms=None):
    """Run the subcommand; 0, or 1 after printing why it failed. ``out``: where the table
    goes (stdout); ``clock_ms``: the wall clock in ms (durations), for tests."""
    setup_logging()
    out = sys.stdout if out is None else out
    clock_ms = clock_ms or (lambda: int(time.time() * 1000))
    try:
        props = client_properties(args.bootstrap_server, args.command_config)
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return FAILED
    command = _COMMANDS[args.transactions_command]
    try:
        try:
            admin = KafkaAdminClient(**props)
        except KafkaError as exc:
            raise _Failed(f"Failed to reach the cluster at {props['bootstrap.servers']!r}: "
                          f"{describe(exc)}") from exc
        with admin:
            table = command(admin, args, clock_ms)
    except _Failed as exc:
        print(f"{str(exc).rstrip('.')}. Enable debug logging for additional detail.",
              file=sys.stderr, flush=True)
        return FAILED
    if table is not None:
        print_table(*table, out)
    return 0


def _list(admin, args, clock_ms):
    try:
        listed = admin.list_transactions(state_filter=args.state_filters,
                                         duration_filter_ms=args.duration_filter)
    except (KafkaError, ValueError) as exc:
        raise _Failed(f"Failed to list transactions: {describe(exc)}") from exc
    return LIST_HEADERS, [(t.transactional_id, str(t.coordinator_id), str(t.producer_id),
                           t.state) for t in listed]


def _describe(admin, args, clock_ms):
    transactional_id = args.transactional_id
    try:
        d = admin.describe_transactions([transactional_id])[transactional_id]
    except KafkaError as exc:
        raise _Failed(f"Failed to describe transaction state of transactional-id "
                      f"`{transactional_id}`: {describe(exc)}") from exc
    start = duration = "None"
    if d.transaction_start_time_ms is not None:
        start = str(d.transaction_start_time_ms)
        duration = str(clock_ms() - d.transaction_start_time_ms)
    return DESCRIBE_HEADERS, [(
        str(d.coordinator_id), transactional_id, str(d.producer_id), str(d.producer_epoch),
        d.state, str(d.transaction_timeout_ms), start, duration,
        ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(d.topic_partitions)))]


def _describe_producers(admin, args, clock_ms):
    tp = TopicPartition(args.topic, args.partition)
    try:
        producers = admin.describe_producers([tp], broker_id=args.broker_id)[tp]
    except KafkaError as exc:
        where = "leader" if args.broker_id is None else f"broker {args.broker_id}"
        raise _Failed(f"Failed to describe producers for partition {tp.topic}-{tp.partition} "
                      f"on {where}: {describe(exc)}") from exc
    return PRODUCERS_HEADERS, [(
        str(p.producer_id), str(p.producer_epoch),
        str(-1 if p.coordinator_epoch is None else p.coordinator_epoch),
        str(p.last_sequence), str(p.last_timestamp),
        "None" if p.current_transaction_start_offset is None
        else str(p.current_transaction_start_offset)) for p in producers]


def _abort(admin, args, clock_ms):
    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is None and args.producer_id is None:
        raise _Failed("The transaction to abort must be identified either with "
                      "--start-offset (for brokers on 3.0 or above) or with --producer-id, "
                      "--producer-epoch, and --coordinator-epoch (for older brokers)")
    if args.start_offset is None:
        if args.producer_epoch is None:
            raise _Failed("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            raise _Failed("Missing required argument --coordinator-epoch")
        producer_id, epoch = args.producer_id, args.producer_epoch
        coordinator_epoch = max(0, args.coordinator_epoch)
    else:
        try:
            producers = admin.describe_producers([tp])[tp]
        except KafkaError as exc:
            raise _Failed(f"Failed to validate producer state for partition {_name(tp)}: "
                          f"{describe(exc)}") from exc
        found = [p for p in producers
                 if p.current_transaction_start_offset == args.start_offset]
        if not found:
            raise _Failed(f"Could not find any open transactions starting at offset "
                          f"{args.start_offset} on partition {_name(tp)}")
        producer_id, epoch = found[0].producer_id, found[0].producer_epoch
        coordinator_epoch = found[0].coordinator_epoch or 0
    try:
        admin.abort_transaction(tp, producer_id, epoch, coordinator_epoch)
    except KafkaError as exc:
        raise _Failed(f"Failed to abort transaction of producer {producer_id} (epoch {epoch}, "
                      f"coordinator epoch {coordinator_epoch}) on partition {_name(tp)}: "
                      f"{describe(exc)}") from exc
    return None


def _find_hanging(admin, args, clock_ms):
    if args.topic is None and args.broker_id is None:
        raise _Failed("The `find-hanging` command requires either --topic or --broker-id to "
                      "limit the scope of the search")
    if args.partition is not None and args.topic is None:
        raise _Failed("The --partition argument requires --topic to be provided")
    max_timeout_ms = args.max_transaction_timeout * 60_000
    partitions = [TopicPartition(args.topic, args.partition)]
    if args.partition is None:
        try:
            described = admin.describe_topics(None if args.topic is None else [args.topic])
        except KafkaError as exc:
            raise _Failed(f"Failed to describe topics: {describe(exc)}") from exc
        partitions = [
            TopicPartition(t["name"], p["partition_index"]) for t in described
            if args.topic is not None or not t["is_internal"] for p in t["partitions"]
            if args.broker_id is None or args.broker_id in p["replica_nodes"]]
    try:
        producers = admin.describe_producers(partitions, broker_id=args.broker_id)
    except KafkaError as exc:
        where = "their leaders" if args.broker_id is None else f"broker {args.broker_id}"
        raise _Failed(f"Failed to describe producers for {len(partitions)} partitions on "
                      f"{where}: {describe(exc)}") from exc
    now = clock_ms()
    candidates = [(tp, p) for tp, found in producers.items() for p in found
                  if p.current_transaction_start_offset is not None
                  and now - p.last_timestamp > max_timeout_ms]
    hanging = []
    if candidates:
        producer_ids = {p.producer_id for _, p in candidates}
        try:
            ids = {t.producer_id: t.transactional_id
                   for t in admin.list_transactions(producer_id_filter=producer_ids)
                   if t.producer_id in producer_ids}
        except KafkaError as exc:
            raise _Failed(f"Failed to list transactions for {len(producer_ids)} producers: "
                          f"{describe(exc)}") from exc
        descriptions = {}
        for transactional_id in set(ids.values()):
            try:
                descriptions[transactional_id] = admin.describe_transactions(
                    [transactional_id])[transactional_id]
            except TransactionalIdNotFoundError:
                descriptions[transactional_id] = None
            except KafkaError as exc:
                raise _Failed(f"Failed to describe {len(set(ids.values()))} transactions: "
                              f"{describe(exc)}") from exc
        for tp, p in candidates:
            description = descriptions.get(ids.get(p.producer_id))
            if description is None or tp not in description.topic_partitions:
                hanging.append((tp, p))
    return HANGING_HEADERS, [(
        tp.topic, str(tp.partition), str(p.producer_id), str(p.producer_epoch),
        str(-1 if p.coordinator_epoch is None else p.coordinator_epoch),
        str(p.current_transaction_start_offset), str(p.last_timestamp),
        str((now - p.last_timestamp) // 60_000)) for tp, p in hanging]


def _name(tp):
    return f"{tp.topic}-{tp.partition}"


_COMMANDS = {"list": _list, "describe": _describe, "describe-producers": _describe_producers,
             "abort": _abort, "find-hanging": _find_hanging}


def print_table(headers, rows, out):
    """Kafka's ``prettyPrintTable``: every cell padded to its column's widest, each
    followed by a tab, the header line first."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]
    for row in (headers, *rows):
        print("".join(f"{cell:<{width}}\t" for cell, width in zip(row, widths)), file=out)
