"""``ringlog consumer-perf-test``: consumer throughput, as Kafka's kafka-consumer-perf-test
(ConsumerPerformance) measures it.

::

    ringlog consumer-perf-test --bootstrap-server D (--topic T | --include REGEX)
        --messages N [--from-latest] [--timeout MS] [--fetch-size BYTES]
        [--consumer.config FILE] [--consumer-property k=v ...] [--print-metrics]
        [--show-detailed-stats [--reporting-interval MS]] [--hide-header] [--bulk]

Reads N records from every partition of T (from the earliest record; with
``--from-latest``, only records produced after it starts), stopping early when ``--timeout``
(10,000 ms) passes without a record. Prints Kafka's header and data line::

    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
        rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec        (one line)
    2024-05-01 12:00:00:000, 2024-05-01 12:00:01:000, 190.7349, 190.7349, 2000000,
        2000000.0000, 0, 1000, 190.7349, 2000000.0000                          (one line)

MB are key and value bytes (MiB), as in Kafka; the clock runs from the consumer's
construction to the last record. Without ``--group`` the consumer subscribes without a
group; with it, it joins that group, and its first rebalance counts in the overall time
(``rebalance.time.ms`` is not measured separately: it prints 0 and the fetch figures equal
the overall ones). With
``--show-detailed-stats`` a line per ``--reporting-interval`` replaces the data line
(Kafka's ``time, threadId, ...`` columns, for the interval). When fewer than N records
arrived it prints Kafka's ``WARNING: Exiting before consuming the expected number of
messages ...`` and, as Kafka, still exits 0.

Consumer settings: Kafka's for this tool (``auto.offset.reset`` earliest or latest,
``max.partition.fetch.bytes`` from ``--fetch-size``, ``check.crcs`` false, ``client.id``
perf-consumer-client), then the file, then ``--consumer-property`` pairs (ringlog's
addition). ``--bulk`` is ringlog's own: records are read with ``poll_batches`` (columns,
no per-record object) instead of ``poll``.
"""
from __future__ import annotations

import datetime
import sys
import time
from operator import itemgetter

from cluster.errors import KafkaError
from cluster.tools.progress import Progress
from cluster.tools.support import (
    ToolError,
    add_bootstrap_argument,
    client_properties,
    fail,
    print_metrics,
    setup_logging,
    stop_on_sigterm,
    topic_pattern,
)
from consumer_proc.consumer import KafkaConsumer

#: Kafka's poll timeout in this tool.
POLL_MS = 100
HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
          "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DETAILED_HEADER = ("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                   "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")

_MIB = 1024 * 1024
_KEY_SIZE, _VALUE_SIZE = itemgetter(10), itemgetter(11)  # ConsumerRecord serialized sizes


def add_arguments(parser):
    add_bootstrap_argument(parser)
    parser.add_argument("--topic", help="the topic to consume from")
    parser.add_argument("--include", metavar="REGEX",
                        help="consume every topic whose name matches this regular expression")
    parser.add_argument("--messages", type=int, required=True,
                        help="number of records to consume")
    parser.add_argument("--from-latest", action="store_true",
                        help="start at the end of the partitions instead of the beginning")
    parser.add_argument("--timeout", type=int, default=10_000, metavar="MS",
                        help="stop when no record arrived for this long (default 10000)")
    parser.add_argument("--fetch-size", type=int, default=1024 * 1024,
                        help="max.partition.fetch.bytes (default 1048576)")
    parser.add_argument("--consumer.config", "--command-config", dest="consumer_config",
                        metavar="FILE", help="consumer properties file")
    parser.add_argument("--consumer-property", "--command-property", dest="consumer_property",
                        action="append", default=[], metavar="KEY=VALUE",
                        help="consumer property, wins over the file (repeatable)")
    parser.add_argument("--group", help="the consumer group to join (none by default)")
    parser.add_argument("--print-metrics", action="store_true",
                        help="print the consumer's metrics at the end")
    parser.add_argument("--show-detailed-stats", action="store_true",
                        help="print the stats of each reporting interval")
    parser.add_argument("--reporting-interval", type=int, default=5000, metavar="MS",
                        help="interval of --show-detailed-stats (default 5000)")
    parser.add_argument("--hide-header", action="store_true",
                        help="do not print the header line")
    parser.add_argument("--bulk", action="store_true",
                        help="ringlog: read with poll_batches (no per-record objects)")


def run(args):
    setup_logging()
    try:
        if (args.topic is None) == (args.include is None):
            raise ToolError("Exactly one of --topic or --include is required")
        if args.messages <= 0:
            raise ToolError(f"--messages should be greater than zero, found {args.messages}")
        if args.reporting_interval <= 0:
            raise ToolError("Reporting interval must be greater than 0.")
        props = client_properties(
            args.bootstrap_server, args.consumer_config, args.consumer_property,
            defaults={"client.id": "perf-consumer-client", "check.crcs": "false"})
        props["auto.offset.reset"] = "latest" if args.from_latest else "earliest"
        props["max.partition.fetch.bytes"] = str(args.fetch_size)
        if args.group is not None:
            props["group.id"] = args.group
        pattern = topic_pattern(args.include) if args.include else None
    except ToolError as exc:
        return fail(exc)
    if not args.hide_header:
        print(DETAILED_HEADER if args.show_detailed_stats else HEADER, flush=True)
    consumer = None
    try:
        with stop_on_sigterm():
            consumer = KafkaConsumer(**props)
            if pattern is not None:
                consumer.subscribe(pattern=rf"(?:{pattern.pattern})\Z")
            else:
                consumer.subscribe([args.topic])
            meter = Meter(args.show_detailed_stats, args.reporting_interval / 1000)
            with Progress(args.messages, "records consumed") as progress:
                _consume(consumer, args, meter, progress)
        if meter.count < args.messages:
            print(f"WARNING: Exiting before consuming the expected number of messages: "
                  f"timeout ({args.timeout} ms) exceeded. You can use the --timeout option "
                  f"to increase the timeout.")
        if not args.show_detailed_stats:
            meter.print_total()
        if args.print_metrics:
            print_metrics(consumer.metrics() or {}, consumer.config["client_id"])
    except KafkaError as exc:
        return fail(exc)
    finally:
        if consumer is not None:
            consumer.close()
    return 0


def _consume(consumer, args, meter, progress):
    wanted = args.messages
    timeout = args.timeout / 1000
    limit = consumer.config["max_poll_records"]
    last_record = time.monotonic()
    while meter.count < wanted:
        remaining = wanted - meter.count
        if args.bulk:
            polled = consumer.poll_batches(timeout_ms=POLL_MS, max_records=remaining)
            count, nbytes = _columns_size(polled)
        else:
            polled = consumer.poll(timeout_ms=POLL_MS, max_records=min(limit, remaining))
            count, nbytes = _records_size(polled)
        now = time.monotonic()
        if count:
            last_record = now
            meter.add(count, nbytes, now)
            progress.update(meter.count)
        elif now - last_record > timeout:
            return


def _records_size(polled):
    """(records, key and value bytes) of a poll() result, with C-level passes only."""
    count = nbytes = 0
    for records in polled.values():
        count += len(records)
        keys = list(map(_KEY_SIZE, records))
        values = list(map(_VALUE_SIZE, records))
        nbytes += sum(keys) + keys.count(-1) + sum(values) + values.count(-1)  # -1: null
    return count, nbytes


def _columns_size(polled):
    """(records, key and value bytes) of a poll_batches() result."""
    count = nbytes = 0
    for runs in polled.values():
        for columns in runs:
            count += len(columns)
            nbytes += int(columns.key_lengths.clip(0).sum() + columns.value_lengths.clip(0).sum())
    return count, nbytes


def _date(epoch_ms):
    """Kafka's default --date-format, yyyy-MM-dd HH:mm:ss:SSS, in local time."""
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000)
    return moment.strftime("%Y-%m-%d %H:%M:%S:") + f"{epoch_ms % 1000:03d}"


class Meter:
    """Counts what was consumed and prints Kafka's lines (the tool's thread only). The
    clock runs from construction (after the consumer's)."""

    def __init__(self, detailed, interval, out=None):
        self.detailed = detailed
        self.interval = interval
        self.out = sys.stdout if out is None else out
        self.count = self.bytes = 0
        self.start_ms = time.time_ns() // 1_000_000
        self.start = self._last_report = time.monotonic()
        self._last_count = self._last_bytes = 0

    def add(self, count, nbytes, now):
        self.count += count
        self.bytes += nbytes
        if self.detailed and now - self._last_report >= self.interval:
            self._print_interval(now)

    def _print_interval(self, now):
        elapsed_ms = (now - self._last_report) * 1000
        interval_mb = (self.bytes - self._last_bytes) / _MIB
        interval_count = self.count - self._last_count
        mb_sec = 1000 * interval_mb / elapsed_ms
        count_sec = 1000 * interval_count / elapsed_ms
        print(f"{_date(time.time_ns() // 1_000_000)}, 0, {self.bytes / _MIB:.4f}, {mb_sec:.4f}, "
              f"{self.count}, {count_sec:.4f}, 0, {elapsed_ms:.0f}, {mb_sec:.4f}, "
              f"{count_sec:.4f}", file=self.out, flush=True)
        self._last_report = now
        self._last_count, self._last_bytes = self.count, self.bytes

    def print_total(self):
        elapsed = max(1e-9, time.monotonic() - self.start)
        end_ms = self.start_ms + round(elapsed * 1000)
        mb = self.bytes / _MIB
        print(f"{_date(self.start_ms)}, {_date(end_ms)}, {mb:.4f}, {mb / elapsed:.4f}, "
              f"{self.count}, {self.count / elapsed:.4f}, 0, {elapsed * 1000:.0f}, "
              f"{mb / elapsed:.4f}, {self.count / elapsed:.4f}", file=self.out, flush=True)
