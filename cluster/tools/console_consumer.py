"""``ringlog console-consumer``: print records to standard output, as kafka-console-consumer
does.

::

    ringlog console-consumer --bootstrap-server D --topic T [--from-beginning]
        [--partition P [--offset earliest|latest|N]] [--max-messages N] [--timeout-ms MS]
        [--property print.key=true --property key.separator=: ...]
        [--consumer-property max.poll.records=1000 ...] [--consumer.config FILE]
    ringlog console-consumer --bootstrap-server D --include REGEX ...

Without ``--partition`` the consumer reads every partition of the topic (or of each topic
``--include`` matches), from the end — or from the beginning with ``--from-beginning`` —
and follows partitions as they are added. With ``--partition`` it reads that one partition
from ``--offset``: ``earliest``, ``latest`` (the default, or ``earliest`` with
``--from-beginning``) or an offset.

With ``--group G`` (or ``group.id`` among the consumer properties) the consumer is a member
of consumer group G, as kafka-console-consumer's: the group shares the topic's partitions
among its members, each starts from the group's committed offset (``auto.offset.reset``,
set by ``--from-beginning``, only where there is none), and it commits as the Java tool
does: ``enable.auto.commit`` stays on (every ``auto.commit.interval.ms``) and what was
printed is committed on exit. A group id given in more than one place must be the same
everywhere (Kafka's check). With ``--partition`` as well the partition is assigned, not
shared, and its offsets are still committed to the group.

Each record is printed by Kafka's ``DefaultMessageFormatter``, configured with
``--property`` (alias ``--formatter-property``; or ``--formatter-config FILE``):
``print.timestamp`` (``CreateTime:1700000000000``), ``print.partition``
(``Partition:0``), ``print.offset`` (``Offset:42``), ``print.headers`` (``k:v,k2:v2`` or
``NO_HEADERS``), ``print.key``, ``print.value`` (true by default), in that order, separated
by ``key.separator`` (TAB) and ended by ``line.separator`` (newline);
``headers.separator`` (``,``) and ``null.literal`` (``null``) as in Kafka.

It stops after ``--max-messages`` records, when ``--timeout-ms`` passes without a record,
on Ctrl-C or SIGTERM, and prints ``Processed a total of N messages`` to stderr (Kafka's
line). Exit code 0, or 1 when the consumer failed (its error on stderr) — where Kafka
logs the error and exits 0.
"""
from __future__ import annotations

import sys
import time

from cluster.errors import KafkaError
from cluster.structs import TopicPartition
from cluster.tools.support import (
    FAILED,
    ToolError,
    add_bootstrap_argument,
    client_properties,
    fail,
    parse_bool,
    properties,
    setup_logging,
    stop_on_sigterm,
    topic_pattern,
)
from consumer_proc.consumer import KafkaConsumer

#: Longest single poll while waiting without --timeout-ms (Ctrl-C is seen between polls).
POLL_MS = 1000

_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def add_arguments(parser):
    add_bootstrap_argument(parser)
    parser.add_argument("--topic", help="the topic to consume from")
    parser.add_argument("--include", metavar="REGEX",
                        help="consume every topic whose name matches this regular expression")
    parser.add_argument("--partition", type=int,
                        help="consume this partition only (from the end unless --offset or "
                             "--from-beginning)")
    parser.add_argument("--offset",
                        help="with --partition: earliest, latest (default) or an offset")
    parser.add_argument("--from-beginning", action="store_true",
                        help="start from the earliest record rather than the latest")
    parser.add_argument("--max-messages", type=int, default=-1,
                        help="stop after this many records (default: never)")
    parser.add_argument("--timeout-ms", type=int, default=-1,
                        help="stop when no record arrived for this long (default: never)")
    parser.add_argument("--property", "--formatter-property", dest="property",
                        action="append", default=[], metavar="KEY=VALUE",
                        help="formatter property: print.key, print.value, print.offset, "
                             "print.partition, print.timestamp, print.headers, key.separator, "
                             "line.separator, headers.separator, null.literal (repeatable)")
    parser.add_argument("--formatter-config", metavar="FILE",
                        help="formatter properties file (--property wins)")
    parser.add_argument("--consumer-property", "--command-property", dest="consumer_property",
                        action="append", default=[], metavar="KEY=VALUE",
                        help="consumer property (repeatable)")
    parser.add_argument("--consumer.config", "--command-config", dest="consumer_config",
                        metavar="FILE", help="consumer properties file "
                                             "(--consumer-property wins)")
    parser.add_argument("--group", help="the consumer group to join (commits its offsets)")
    parser.add_argument("--isolation-level", help="read_uncommitted (default) or read_committed")


def run(args):
    setup_logging()
    try:
        start = _start_offset(args)
        formatter = MessageFormatter(properties(args.formatter_config, args.property,
                                                "formatter config"))
        props = _consumer_properties(args)
        pattern = topic_pattern(args.include) if args.include else None
    except ToolError as exc:
        return fail(exc)
    count = 0
    failed = False
    consumer = None
    try:
        with stop_on_sigterm():
            consumer = KafkaConsumer(**props)
            if args.partition is not None:
                _assign(consumer, TopicPartition(args.topic, args.partition), start)
            elif pattern is not None:
                consumer.subscribe(pattern=rf"(?:{pattern.pattern})\Z")  # whole names, as Kafka
            else:
                consumer.subscribe([args.topic])
            for written in _consume(consumer, formatter, args.max_messages, args.timeout_ms):
                count += written
    except KafkaError as exc:
        failed = True
        fail(exc)
    finally:
        if consumer is not None:
            consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr, flush=True)
    return FAILED if failed else 0


def _start_offset(args):
    """Kafka's checks of the topic, partition and offset options; the start of a
    ``--partition``: "earliest", "latest" or an offset."""
    if (args.topic is None) == (args.include is None):
        raise ToolError("Exactly one of --topic or --include is required")
    if args.partition is None:
        if args.offset is not None:
            raise ToolError("The partition is required when offset is specified.")
        return None
    if args.topic is None:
        raise ToolError("The topic is required when partition is specified.")
    if args.from_beginning and args.offset is not None:
        raise ToolError("Options from-beginning and offset cannot be specified together.")
    if args.offset is None:
        return "earliest" if args.from_beginning else "latest"
    offset = args.offset.lower()
    if offset in ("earliest", "latest"):
        return offset
    if offset.isdigit():
        return int(offset)
    raise ToolError(f"The provided offset value '{args.offset}' is incorrect. Valid values "
                    f"are 'earliest', 'latest', or a non-negative long.")


def _consumer_properties(args):
    props = client_properties(args.bootstrap_server, args.consumer_config,
                              args.consumer_property, defaults={"client.id": "console-consumer"})
    reset = props.get("auto.offset.reset", props.get("auto_offset_reset"))
    if reset is None:
        props["auto.offset.reset"] = "earliest" if args.from_beginning else "latest"
    elif args.from_beginning and reset != "earliest":
        raise ToolError(f"Can't simultaneously specify --from-beginning and "
                        f"'auto.offset.reset={reset}', please remove one option")
    _check_group_ids(props, args.group)
    for key, value in (("group.id", args.group), ("isolation.level", args.isolation_level)):
        if value is not None:  # the flag wins over a property in either spelling
            props.pop(key.replace(".", "_"), None)
            props[key] = value
    return props


def _check_group_ids(props, group):
    """Kafka's check: the group ids of ``--group`` and of the consumer properties (either
    spelling) all agree."""
    given = {value for value in (group, props.get("group.id"), props.get("group_id"))
             if value is not None}
    if len(given) > 1:
        raise ToolError(f"The group ids provided in different places (directly using "
                        f"'--group', via '--consumer-property', or via '--consumer.config') "
                        f"do not match. Detected group ids: "
                        f"{', '.join(repr(g) for g in sorted(given))}")


def _assign(consumer, tp, start):
    consumer.assign([tp])
    if start == "earliest":
        consumer.seek_to_beginning(tp)
    elif start == "latest":
        consumer.seek_to_end(tp)
    else:
        consumer.seek(tp, start)


def _consume(consumer, formatter, max_messages, timeout_ms):
    """Poll and print until ``max_messages`` (-1: no limit) or ``timeout_ms`` without a
    record (-1: never); yields how many records each poll printed."""
    out = sys.stdout.buffer
    limit = consumer.config["max_poll_records"]
    count = 0
    idle_since = time.monotonic()
    while max_messages < 0 or count < max_messages:
        wait_ms = POLL_MS
        if timeout_ms >= 0:
            left = timeout_ms - (time.monotonic() - idle_since) * 1000
            if left <= 0:
                return
            wait_ms = min(wait_ms, left)
        wanted = limit if max_messages < 0 else min(limit, max_messages - count)
        polled = consumer.poll(timeout_ms=wait_ms, max_records=wanted)
        if not polled:
            continue
        idle_since = time.monotonic()
        lines = [formatter.format(record) for records in polled.values() for record in records]
        out.write(b"".join(lines))
        out.flush()
        count += len(lines)
        yield len(lines)


class MessageFormatter:
    """Kafka's DefaultMessageFormatter: a ConsumerRecord -> the bytes printed for it
    (module doc). Immutable once built; any thread may use it."""

    def __init__(self, props):
        def flag(name, default):
            return parse_bool(props[name]) if name in props else default

        def text(name, default):
            return props.get(name, default).encode("utf-8")
        self.print_timestamp = flag("print.timestamp", False)
        self.print_partition = flag("print.partition", False)
        self.print_offset = flag("print.offset", False)
        self.print_headers = flag("print.headers", False)
        self.print_key = flag("print.key", False)
        self.print_value = flag("print.value", True)
        self.key_separator = text("key.separator", "\t")
        self.line_separator = text("line.separator", "\n")
        self.headers_separator = text("headers.separator", ",")
        self.null_literal = text("null.literal", "null")

    def format(self, record):
        fields = []
        if self.print_timestamp:
            fields.append(f"{_TIMESTAMP_TYPES[record.timestamp_type]}:"
                          f"{record.timestamp}".encode())
        if self.print_partition:
            fields.append(b"Partition:%d" % record.partition)
        if self.print_offset:
            fields.append(b"Offset:%d" % record.offset)
        if self.print_headers:
            fields.append(self.headers_separator.join(
                k.encode("utf-8") + b":" + self._data(v) for k, v in record.headers)
                if record.headers else b"NO_HEADERS")
        if self.print_key:
            fields.append(self._data(record.key))
        if self.print_value:
            fields.append(self._data(record.value))
        if not fields:
            return b""
        return self.key_separator.join(fields) + self.line_separator

    def _data(self, data):
        return self.null_literal if data is None else bytes(data)
