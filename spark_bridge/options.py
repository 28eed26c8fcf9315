"""The ``ringlog`` source's options: Spark's Kafka source options, the same names, defaults
and rules (``KafkaSourceProvider``), so a job moves between ``format("kafka")`` and
``format("ringlog")`` by changing the format and the bootstrap address.

Option names are case-insensitive (Spark lower-cases them). A bad value or a conflict raises
``InvalidOptionError`` whose message names the option and the value found, before any
query runs where Spark's Kafka source does so too.

===========================  =====================  =====================================
option                       default                meaning
===========================  =====================  =====================================
bootstrap.servers            (required)             the cluster's data directory (Spark's
                                                    name kafka.bootstrap.servers works)
subscribe                    one of these three     comma-separated topics
subscribePattern             (exactly one)          regex over whole topic names
assign                                              JSON ``{"topicA":[0,1],"topicB":[2]}``
startingOffsets              batch: earliest;       earliest, latest, or JSON
                             stream: latest         ``{"t":{"0":23,"1":-2}}`` (-2
                                                    earliest, -1 latest); batch: not
                                                    latest
endingOffsets                latest (batch only)    latest or JSON (-1 latest), at most
                                                    the high watermark; not earliest
maxOffsetsPerTrigger         none                   streaming: records per micro-batch,
                                                    spread over the partitions
failOnDataLoss               true                   fail (true) or warn and skip (false)
                                                    when records were deleted unread
minPartitions                none                   split offset ranges into at least
                                                    about this many Spark tasks
includeHeaders               false                  add the ``headers`` column
kafkaConsumer.pollTimeoutMs  120000                 how long a task waits for records
                                                    the high watermark says exist
===========================  =====================  =====================================

Not supported (rejected with a message rather than silently ignored): the timestamp
options (``startingTimestamp``, ``startingOffsetsByTimestamp``, ``endingTimestamp``,
``endingOffsetsByTimestamp``) and, as in Spark, the Kafka consumer settings
``kafka.auto.offset.reset``, ``kafka.key.deserializer``, ``kafka.value.deserializer``,
``kafka.enable.auto.commit``, ``kafka.interceptor.classes``. Other options are ignored,
as Spark ignores them.

``parse_batch_options`` / ``parse_stream_options`` return a ``SourceOptions``, an immutable
value the readers carry to Spark's Python workers (pickled).
"""
from __future__ import annotations

import dataclasses
import logging
import re

from spark_bridge.consumer_strategy import Assign, Subscribe, SubscribePattern
from spark_bridge.offsets import (
    EARLIEST,
    LATEST,
    OffsetsFormatError,
    parse_partition_offsets,
    parse_partitions,
)

log = logging.getLogger(__name__)

BOOTSTRAP_SERVERS = "bootstrap.servers"
KAFKA_BOOTSTRAP_SERVERS = "kafka.bootstrap.servers"
SUBSCRIBE = "subscribe"
SUBSCRIBE_PATTERN = "subscribePattern"
ASSIGN = "assign"
STARTING_OFFSETS = "startingOffsets"
ENDING_OFFSETS = "endingOffsets"
MAX_OFFSETS_PER_TRIGGER = "maxOffsetsPerTrigger"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
MIN_PARTITIONS = "minPartitions"
INCLUDE_HEADERS = "includeHeaders"
POLL_TIMEOUT_MS = "kafkaConsumer.pollTimeoutMs"

STRATEGY_OPTIONS = (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN)
TIMESTAMP_OPTIONS = ("startingTimestamp", "startingOffsetsByTimestamp", "endingTimestamp",
                     "endingOffsetsByTimestamp")
DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's default: spark.network.timeout, 120 s

_DESERIALIZER_TEXT = ("are deserialized as byte arrays. Use DataFrame operations to "
                      "explicitly deserialize the {}.")
#: Kafka consumer settings Spark's Kafka source refuses, and why.
UNSUPPORTED_KAFKA_OPTIONS = {
    "kafka.auto.offset.reset": (
        f"Instead set the source option '{STARTING_OFFSETS}' to 'earliest' or 'latest' to "
        f"specify where to start. Structured Streaming manages which offsets are consumed "
        f"internally."),
    "kafka.key.deserializer": "Keys " + _DESERIALIZER_TEXT.format("keys"),
    "kafka.value.deserializer": "Values " + _DESERIALIZER_TEXT.format("values"),
    "kafka.enable.auto.commit": "Structured Streaming tracks the offsets itself.",
    "kafka.interceptor.classes": "Interceptors could modify the records.",
}

_TRUE_FALSE = {"true": True, "false": False}


class InvalidOptionError(ValueError):
    """A ringlog source option with a bad value, or options that conflict (the message names
    the option)."""


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    """Validated options of one ``ringlog`` read (module doc). ``starting`` / ``ending``:
    ``"earliest"``, ``"latest"``, or a ``{TopicPartition: offset}`` dict (-2 earliest,
    -1 latest); ``ending`` is None for streaming."""

    bootstrap_servers: str
    strategy: object
    starting: object
    ending: object = None
    max_offsets_per_trigger: int = None
    fail_on_data_loss: bool = True
    min_partitions: int = None
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS


def _lower(options):
    return {key.lower(): value for key, value in options.items()}


def _get(options, name):
    return options.get(name.lower())


def _boolean(options, name, default):
    raw = _get(options, name)
    if raw is None:
        return default
    value = _TRUE_FALSE.get(str(raw).strip().lower())
    if value is None:
        raise InvalidOptionError(f"option '{name}' must be 'true' or 'false', found {raw!r}")
    return value


def _positive_int(options, name, what="must be a positive integer"):
    raw = _get(options, name)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidOptionError(f"option '{name}' {what}, found {raw!r}") from None
    if value <= 0:
        raise InvalidOptionError(f"option '{name}' {what}, found {raw!r}")
    return value


def include_headers(options):
    """The ``includeHeaders`` option (False by default); InvalidOptionError unless it is
    true or false. ``schema()`` needs only this."""
    return _boolean(_lower(options), INCLUDE_HEADERS, False)


def _bootstrap_servers(options):
    plain = _get(options, BOOTSTRAP_SERVERS)
    spark = _get(options, KAFKA_BOOTSTRAP_SERVERS)
    if plain is not None and spark is not None and plain.strip() != spark.strip():
        raise InvalidOptionError(
            f"options '{BOOTSTRAP_SERVERS}' ({plain!r}) and '{KAFKA_BOOTSTRAP_SERVERS}' "
            f"({spark!r}) disagree; give one of them")
    value = plain if plain is not None else spark
    if value is None or not value.strip():
        raise InvalidOptionError(
            f"option '{BOOTSTRAP_SERVERS}' (the cluster's data directory) must be specified "
            f"for the ringlog source, found {value!r}")
    return value.strip()


def _strategy(options):
    given = [name for name in STRATEGY_OPTIONS if _get(options, name) is not None]
    if not given:
        raise InvalidOptionError(
            f"One of the following options must be specified for the ringlog source: "
            f"{', '.join(STRATEGY_OPTIONS)}")
    if len(given) > 1:
        raise InvalidOptionError(
            f"Only one of the following options can be specified for the ringlog source: "
            f"{', '.join(STRATEGY_OPTIONS)}; found {', '.join(given)}")
    name = given[0]
    value = _get(options, name)
    if name == SUBSCRIBE:
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise InvalidOptionError(f"No topics to subscribe to as specified value for "
                                     f"option '{SUBSCRIBE}' is {value!r}")
        return Subscribe(topics)
    if name == SUBSCRIBE_PATTERN:
        pattern = value.strip()
        if not pattern:
            raise InvalidOptionError(f"Pattern to subscribe is empty as specified value for "
                                     f"option '{SUBSCRIBE_PATTERN}' is {value!r}")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InvalidOptionError(f"option '{SUBSCRIBE_PATTERN}' is not a valid regular "
                                     f"expression: {pattern!r} ({exc})") from None
        return SubscribePattern(pattern)
    if not value.strip().startswith("{"):
        raise InvalidOptionError(f"No topicpartitions to assign as specified value for "
                                 f"option '{ASSIGN}' is {value!r}")
    try:
        partitions = parse_partitions(value)
    except OffsetsFormatError as exc:
        raise InvalidOptionError(f"option '{ASSIGN}': {exc}") from None
    if not partitions:
        raise InvalidOptionError(f"No topicpartitions to assign as specified value for "
                                 f"option '{ASSIGN}' is {value!r}")
    return Assign(tuple(partitions))


def _offsets(options, name, default):
    """``"earliest"``, ``"latest"`` or ``{TopicPartition: offset}`` from option ``name``."""
    raw = _get(options, name)
    if raw is None:
        return default
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        offsets = parse_partition_offsets(text)
    except OffsetsFormatError as exc:
        raise InvalidOptionError(f"option '{name}' must be 'earliest', 'latest' or JSON "
                                 f"offsets: {exc}") from None
    for tp, offset in offsets.items():
        if offset < EARLIEST:
            raise InvalidOptionError(
                f"option '{name}': offset {offset} of {tp.topic}-{tp.partition} must be "
                f">= 0, or -2 (earliest) or -1 (latest)")
    return offsets


def _general(options):
    """Checks shared by batch and streaming reads (Spark's validateGeneralOptions)."""
    for name in TIMESTAMP_OPTIONS:
        if _get(options, name) is not None:
            raise InvalidOptionError(f"option '{name}' is not supported by the ringlog "
                                     f"source; use '{STARTING_OFFSETS}' / '{ENDING_OFFSETS}' "
                                     f"with offsets")
    for name, why in UNSUPPORTED_KAFKA_OPTIONS.items():
        if name in options:
            raise InvalidOptionError(f"Kafka option '{name}' is not supported. {why}")
    return dict(
        bootstrap_servers=_bootstrap_servers(options),
        strategy=_strategy(options),
        min_partitions=_positive_int(options, MIN_PARTITIONS, "must be positive"),
        fail_on_data_loss=_boolean(options, FAIL_ON_DATA_LOSS, True),
        include_headers=_boolean(options, INCLUDE_HEADERS, False),
        poll_timeout_ms=_positive_int(options, POLL_TIMEOUT_MS) or DEFAULT_POLL_TIMEOUT_MS,
    )


def _describe_tp(tp):
    return f"{tp.topic}-{tp.partition}"


def parse_batch_options(options):
    """SourceOptions of ``spark.read.format("ringlog")``; InvalidOptionError naming the
    option (Spark's validateBatchOptions and checkOffsetLimitValidity)."""
    options = _lower(options)
    starting = _offsets(options, STARTING_OFFSETS, "earliest")
    if starting == "latest":
        raise InvalidOptionError(f"option '{STARTING_OFFSETS}': starting offset can't be "
                                 f"latest for batch queries")
    if isinstance(starting, dict):
        for tp, offset in starting.items():
            if offset == LATEST:
                raise InvalidOptionError(f"option '{STARTING_OFFSETS}' for "
                                         f"{_describe_tp(tp)} can't be latest (-1) for "
                                         f"batch queries")
    ending = _offsets(options, ENDING_OFFSETS, "latest")
    if ending == "earliest":
        raise InvalidOptionError(f"option '{ENDING_OFFSETS}': ending offset can't be "
                                 f"earliest for batch queries")
    if isinstance(ending, dict):
        for tp, offset in ending.items():
            if offset == EARLIEST:
                raise InvalidOptionError(f"option '{ENDING_OFFSETS}' for {_describe_tp(tp)} "
                                         f"can't be earliest (-2) for batch queries")
    if isinstance(starting, dict) and isinstance(ending, dict):
        if set(starting) != set(ending):
            raise InvalidOptionError(
                f"options '{STARTING_OFFSETS}' and '{ENDING_OFFSETS}' must name the same "
                f"partitions: {sorted(map(_describe_tp, starting))} vs "
                f"{sorted(map(_describe_tp, ending))}")
        for tp, start in starting.items():
            end = ending[tp]
            if start >= 0 and end >= 0 and start > end:
                raise InvalidOptionError(
                    f"option '{STARTING_OFFSETS}' {start} of {_describe_tp(tp)} is after "
                    f"its '{ENDING_OFFSETS}' {end}")
    general = _general(options)
    if _get(options, MAX_OFFSETS_PER_TRIGGER) is not None:
        log.warning("%s option ignored in batch queries", MAX_OFFSETS_PER_TRIGGER)
    return SourceOptions(starting=starting, ending=ending, **general)


def parse_stream_options(options):
    """SourceOptions of ``spark.readStream.format("ringlog")``; InvalidOptionError naming
    the option (Spark's validateStreamOptions)."""
    options = _lower(options)
    if _get(options, ENDING_OFFSETS) is not None:
        raise InvalidOptionError(f"option '{ENDING_OFFSETS}' is not valid in streaming "
                                 f"queries")
    starting = _offsets(options, STARTING_OFFSETS, "latest")
    general = _general(options)
    return SourceOptions(starting=starting,
                         max_offsets_per_trigger=_positive_int(options, MAX_OFFSETS_PER_TRIGGER),
                         **general)


def validate_common(options):
    """The checks both kinds of read share, and the offsets' syntax; ``schema()`` runs them
    so that a bad option fails at ``load()``, as with Spark's Kafka source."""
    options = _lower(options)
    _general(options)
    _offsets(options, STARTING_OFFSETS, None)
    _offsets(options, ENDING_OFFSETS, None)
