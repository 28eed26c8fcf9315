"""``ringlog console-producer``: one record per line of standard input, as
kafka-console-producer does.

::

    ringlog console-producer --bootstrap-server D --topic T [--sync]
        [--property parse.key=true --property key.separator=:]
        [--producer-property acks=all ...] [--producer.config FILE]
        [--compression-codec [CODEC]] [--batch-size N] [--timeout LINGER_MS] ...

Each line (its end, ``\\n`` or ``\\r\\n``, dropped) becomes a record, read as Kafka's
``LineMessageReader`` reads it, configured by ``--property`` (or ``--reader-config FILE``):

    parse.key=false         the line starts with the key, then ``key.separator`` (TAB)
    parse.headers=false     the line starts with headers ``h1:v1,h2:v2``, then
                            ``headers.delimiter`` (TAB); ``headers.separator`` (``,``, a
                            regular expression) between headers, ``headers.key.separator``
                            (``:``) between a header's key and value
    null.marker             a key, value or header value equal to it is sent as null
    ignore.error=false      a line without the separator is sent whole as the value
                            instead of failing

Producer settings: Kafka's defaults for this tool (``linger.ms`` 1000 — ``--timeout`` —,
``acks`` -1, ``request.timeout.ms`` 1500, ``retries`` 3, ``client.id``
console-producer, ...), then ``--producer.config``, then ``--producer-property`` pairs;
the dedicated flags (``--batch-size``, ``--request-required-acks``, ...) win when given.
Unlike Kafka, ``--compression-codec`` only sets ``compression.type`` when given (Kafka
resets a ``compression.type`` property to none without it).

Without ``--sync`` records are sent in the background; a failed send is reported on
stderr (Kafka's "Error when sending message to topic ..." line) and, unlike Kafka, makes
the exit code 1. With ``--sync`` each record is sent at once (without waiting for
``linger.ms``) and acknowledged before the next line is read; the first failure stops the
tool (exit 1). A line that cannot be parsed stops it too,
after what was read before it is sent. On a terminal each line is prompted with ``>``.
"""
from __future__ import annotations

import re
import sys

from cluster.errors import KafkaError
from cluster.producer.kafka_producer import KafkaProducer
from cluster.tools.support import (
    FAILED,
    ToolError,
    add_bootstrap_argument,
    add_producer_arguments,
    client_properties,
    describe,
    fail,
    has_property,
    parse_bool,
    properties,
    setup_logging,
    stop_on_sigterm,
)

#: (flag attribute, Kafka producer key, Kafka's default for this tool).
_FLAG_KEYS = (
    ("timeout", "linger.ms", "1000"),
    ("request_required_acks", "acks", "-1"),
    ("request_timeout_ms", "request.timeout.ms", "1500"),
    ("message_send_max_retries", "retries", "3"),
    ("retry_backoff_ms", "retry.backoff.ms", "100"),
    ("max_memory_bytes", "buffer.memory", str(32 * 1024 * 1024)),
    ("batch_size", "batch.size", "16384"),
    ("max_partition_memory_bytes", "batch.size", "16384"),
    ("metadata_expiry_ms", "metadata.max.age.ms", "300000"),
    ("max_block_ms", "max.block.ms", "60000"),
)


def add_arguments(parser):
    add_bootstrap_argument(parser)
    parser.add_argument("--topic", required=True, help="the topic to produce to")
    parser.add_argument("--sync", action="store_true",
                        help="send each record and wait for its acknowledgement")
    parser.add_argument("--compression-codec", nargs="?", const="gzip", metavar="CODEC",
                        help="none, gzip, snappy, lz4 or zstd (gzip when given without value)")
    parser.add_argument("--batch-size", type=int, help="batch.size (default 16384)")
    parser.add_argument("--max-partition-memory-bytes", type=int,
                        help="batch.size too (wins over --batch-size)")
    parser.add_argument("--message-send-max-retries", type=int, help="retries (default 3)")
    parser.add_argument("--retry-backoff-ms", type=int, help="retry.backoff.ms (default 100)")
    parser.add_argument("--timeout", type=int, metavar="LINGER_MS",
                        help="linger.ms (default 1000)")
    parser.add_argument("--request-required-acks", metavar="ACKS", help="acks (default -1)")
    parser.add_argument("--request-timeout-ms", type=int,
                        help="request.timeout.ms (default 1500)")
    parser.add_argument("--metadata-expiry-ms", type=int,
                        help="metadata.max.age.ms (default 300000)")
    parser.add_argument("--max-block-ms", type=int, help="max.block.ms (default 60000)")
    parser.add_argument("--max-memory-bytes", type=int,
                        help="buffer.memory (default 33554432)")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="line reader property: parse.key, key.separator, parse.headers, "
                             "headers.delimiter, headers.separator, headers.key.separator, "
                             "null.marker, ignore.error (repeatable)")
    parser.add_argument("--reader-config", metavar="FILE",
                        help="line reader properties file (--property wins)")
    add_producer_arguments(parser)


def run(args):
    setup_logging()
    try:
        reader = LineReader(properties(args.reader_config, args.property, "reader config"))
        props = _producer_properties(args)
    except ToolError as exc:
        return fail(exc)
    try:
        producer = KafkaProducer(**props)
    except KafkaError as exc:
        return fail(exc)
    failures = []
    try:
        with stop_on_sigterm():
            _produce(producer, reader, args.topic, args.sync, failures)
    except (ToolError, KafkaError) as exc:
        failures.append(exc)
        fail(exc)
    finally:
        producer.close()
    return FAILED if failures else 0


def _producer_properties(args):
    props = client_properties(args.bootstrap_server, args.producer_config,
                              args.producer_property, defaults={"client.id": "console-producer"})
    for attribute, key, default in _FLAG_KEYS:  # Kafka's maybeMergeOptions
        value = getattr(args, attribute)
        if value is not None:
            props.pop(key.replace(".", "_"), None)
            props[key] = str(value)
        elif not has_property(props, key):
            props[key] = default
    if args.compression_codec is not None:
        props["compression.type"] = args.compression_codec
    return props


def _produce(producer, reader, topic, sync, failures):
    stdin = sys.stdin.buffer
    prompt = sys.stdin.isatty() and sys.stdout.isatty()

    def report(key, value, exc):
        failures.append(exc)
        print(f"Error when sending message to topic {topic} with key: {_size(key)}, value: "
              f"{_size(value)} with error: {describe(exc)}", file=sys.stderr, flush=True)
    while True:
        if prompt:
            sys.stdout.write(">")
            sys.stdout.flush()
        line = stdin.readline()
        if not line:
            return
        key, value, headers = reader.parse(line)
        try:
            future = producer.send(topic, value=value, key=key, headers=headers)
        except (ValueError, KafkaError) as exc:
            report(key, value, exc)
            continue
        if sync:
            producer.flush()  # now, not after linger.ms
            future.get()
        else:
            future.add_errback(lambda exc, k=key, v=value: report(k, v, exc))


#: The line reader's properties and Kafka's defaults (null.marker has none: unset).
_DEFAULTS = {"parse.key": "false", "key.separator": "\t", "parse.headers": "false",
             "headers.delimiter": "\t", "headers.separator": ",",
             "headers.key.separator": ":", "ignore.error": "false"}


def _size(data):
    return "null" if data is None else f"{len(data)} bytes"


class LineReader:
    """Kafka's LineMessageReader: a line of bytes -> (key, value, headers) (module doc).

    Lines are read as UTF-8; bytes that are not UTF-8 pass through unchanged. Owned by the
    tool's thread (it counts lines).
    """

    def __init__(self, props):
        props = {**_DEFAULTS, **props}
        self.parse_key = parse_bool(props["parse.key"])
        self.key_separator = props["key.separator"]
        self.parse_headers = parse_bool(props["parse.headers"])
        self.headers_delimiter = props["headers.delimiter"]
        self.headers_separator = props["headers.separator"]
        self.headers_key_separator = props["headers.key.separator"]
        self.ignore_error = parse_bool(props["ignore.error"])
        self.null_marker = props.get("null.marker")
        self.line_number = 0
        pairs = [("headers.delimiter", "headers.separator"),
                 ("headers.delimiter", "headers.key.separator"),
                 ("headers.separator", "headers.key.separator")]
        if self.null_marker is not None:
            pairs += [("null.marker", other) for other in (
                "key.separator", "headers.separator", "headers.delimiter",
                "headers.key.separator")]
        for name, other in pairs:  # Kafka's checks
            if props[name] == props[other]:
                raise ToolError(f"{name} and {other} may not be equal (both "
                                f"{props[name]!r})")
        try:
            self._split_headers = re.compile(self.headers_separator).split
        except re.error as exc:
            raise ToolError(f"headers.separator {self.headers_separator!r} is not a valid "
                            f"regular expression: {exc}") from None

    def parse(self, raw):
        """The record of one line (``raw``: bytes, with or without its line end)."""
        self.line_number += 1
        line = raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8", "surrogateescape")
        headers = self._cut(self.parse_headers, line, 0, self.headers_delimiter,
                            "headers delimiter")
        start = 0 if headers is None else len(headers) + len(self.headers_delimiter)
        key = self._cut(self.parse_key, line, start, self.key_separator, "key separator")
        if key is not None:
            start += len(key) + len(self.key_separator)
        value = line[start:]
        return (self._bytes(key), self._bytes(value),
                None if headers is None or headers == self.null_marker
                else self._headers(headers))

    def _cut(self, enabled, line, start, separator, what):
        if not enabled:
            return None
        end = line.find(separator, start)
        if end < 0:
            if self.ignore_error:
                return None
            raise ToolError(f"No {what} found on line number {self.line_number}: '{line}'")
        return line[start:end]

    def _headers(self, text):
        headers = []
        for pair in self._split_headers(text):
            cut = pair.find(self.headers_key_separator)
            if cut < 0:
                if not self.ignore_error:
                    raise ToolError(f"No header key separator found in pair '{pair}' on line "
                                    f"number {self.line_number}")
                headers.append((pair, None))
                continue
            name = pair[:cut]
            if name == self.null_marker:
                raise ToolError(f"Header keys should not be equal to the null marker "
                                f"'{self.null_marker}' as they can't be null")
            headers.append((name, self._bytes(pair[cut + len(self.headers_key_separator):])))
        return headers

    def _bytes(self, text):
        if text is None or text == self.null_marker:
            return None
        return text.encode("utf-8", "surrogateescape")
