"""``ringlog transactions``: Kafka's ``kafka-transactions.sh`` (``TransactionsCommand``) —
list the transactional ids the coordinators hold, describe one, and describe the active
producers of a partition.

::

    ringlog transactions --bootstrap-server DATA_DIR list [--state-filters Ongoing ...]
                                                          [--duration-filter MS]
    ringlog transactions --bootstrap-server DATA_DIR describe --transactional-id ID
    ringlog transactions --bootstrap-server DATA_DIR describe-producers --topic T
                                                          --partition N [--broker-id B]

Kafka's flags, subcommands and tables: the columns Kafka's tool prints, each padded to its
widest cell and followed by a tab; ``None`` where Kafka prints it (no transaction, no
open transaction). ``list`` asks every broker (each coordinates its own
``__transaction_state`` partitions), ``describe`` the id's coordinator,
``describe-producers`` the partition's leader (or ``--broker-id``'s replica). ``list
--state-filters`` is ringlog's addition (Java's ``ListTransactionsOptions.filterStates``,
which Kafka's tool does not expose); a name Kafka does not know fails the tool, naming it.

A failure prints Kafka's ``Failed to ...: <error>. Enable debug logging for additional
detail.`` to stderr and exits 1: an unknown transactional id (TransactionalIdNotFoundError),
a topic or partition that does not exist (UnknownTopicOrPartitionError), a data directory
with no cluster running. ``abort`` and ``find-hanging`` are not built.

Runs in the calling thread (it owns its KafkaAdminClient).
"""
from __future__ import annotations

import sys
import time

from cluster.admin.kafka_admin_client import TRANSACTION_STATES, KafkaAdminClient
from cluster.errors import KafkaError
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
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                     "LastTimestamp", "CurrentTransactionStartOffset")


class _Failed(Exception):
    """The command failed: ``message`` is Kafka's ``Failed to ...`` line."""


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
            headers, rows = command(admin, args, clock_ms)
    except _Failed as exc:
        print(f"{str(exc).rstrip('.')}. Enable debug logging for additional detail.",
              file=sys.stderr, flush=True)
        return FAILED
    print_table(headers, rows, out)
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


_COMMANDS = {"list": _list, "describe": _describe, "describe-producers": _describe_producers}


def print_table(headers, rows, out):
    """Kafka's ``prettyPrintTable``: every cell padded to its column's widest, each
    followed by a tab, the header line first."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]
    for row in (headers, *rows):
        print("".join(f"{cell:<{width}}\t" for cell, width in zip(row, widths)), file=out)
