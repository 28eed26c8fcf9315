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
startingTimestamp            none                   a timestamp (ms) for every partition:
                                                    start at the first record at or after
                                                    it; before startingOffsetsByTimestamp
                                                    and startingOffsets
startingOffsetsByTimestamp   none                   JSON ``{"t":{"0":1700000000000}}``
                                                    naming every partition read; before
                                                    startingOffsets
startingOffsetsByTimestamp-  error                  no record at or after a starting
Strategy                                            timestamp: fail (error) or start at
                                                    the latest offset (latest)
endingTimestamp,             none (batch only)      as the starting ones, for the ending
endingOffsetsByTimestamp                            offsets; no record at or after the
                                                    timestamp: the latest offset
maxOffsetsPerTrigger         none                   streaming: at most this many records
                                                    per micro-batch, spread over the
                                                    partitions
minOffsetsPerTrigger         none                   streaming: a micro-batch waits until
                                                    this many records are waiting, or
                                                    until maxTriggerDelay has passed
                                                    since the last one; at most
                                                    maxOffsetsPerTrigger
maxTriggerDelay              15m                    streaming: the longest such a wait
                                                    (a duration: 500ms, 30s, 15m, 1h;
                                                    a bare number is milliseconds)
failOnDataLoss               true                   fail (true) or warn and skip (false)
                                                    when records were deleted unread
minPartitions                none                   split offset ranges into at least
                                                    about this many Spark tasks
maxRecordsPerPartition       none                   split offset ranges so that no Spark
                                                    task reads more than this many
                                                    records (then minPartitions applies)
includeHeaders               false                  add the ``headers`` column
kafkaConsumer.pollTimeoutMs  120000                 how long a task waits for records
                                                    the high watermark says exist
kafka.isolation.level        read_uncommitted       read_committed: offsets end at the
                                                    last stable offset and records of
                                                    aborted transactions are skipped
===========================  =====================  =====================================

The trigger options apply to streaming reads; a batch read logs that it ignores them, as
Spark does. Under ``Trigger.AvailableNow`` a micro-batch does not wait for
``minOffsetsPerTrigger`` (Spark's would wait up to ``maxTriggerDelay`` before reading the
last records there are; the query would only end later).

Timestamps are looked up with ListOffsets (``timestamp_offsets``); "latest" is the high
watermark, or the last stable offset under read_committed, whichever option asks for it.

Not supported (rejected with a message rather than silently ignored), as in Spark: the
Kafka consumer settings ``kafka.auto.offset.reset``, ``kafka.key.deserializer``,
``kafka.value.deserializer``, ``kafka.enable.auto.commit``, ``kafka.interceptor.classes``.
Any other option is unknown: it is logged once per read (a WARNING naming it: a misspelt
option does not pass unnoticed), except ``kafka.*`` settings, which Spark's Kafka source
hands to its Kafka consumer and ringlog has no use for (one DEBUG line lists them).

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
from spark_bridge.timestamp_offsets import (
    ERROR as ON_NO_MATCH_ERROR,
    LATEST as ON_NO_MATCH_LATEST,
    STRATEGIES,
    ByTimestamp,
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
MIN_OFFSETS_PER_TRIGGER = "minOffsetsPerTrigger"
MAX_TRIGGER_DELAY = "maxTriggerDelay"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
MIN_PARTITIONS = "minPartitions"
MAX_RECORDS_PER_PARTITION = "maxRecordsPerPartition"
INCLUDE_HEADERS = "includeHeaders"
POLL_TIMEOUT_MS = "kafkaConsumer.pollTimeoutMs"
ISOLATION_LEVEL = "kafka.isolation.level"
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")

STRATEGY_OPTIONS = (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN)
STARTING_TIMESTAMP = "startingTimestamp"
STARTING_OFFSETS_BY_TIMESTAMP = "startingOffsetsByTimestamp"
ENDING_TIMESTAMP = "endingTimestamp"
ENDING_OFFSETS_BY_TIMESTAMP = "endingOffsetsByTimestamp"
STARTING_TIMESTAMP_STRATEGY = "startingOffsetsByTimestampStrategy"
#: Where a read starts, then ends: the options by precedence (Spark's).
STARTING_OPTIONS = (STARTING_TIMESTAMP, STARTING_OFFSETS_BY_TIMESTAMP, STARTING_OFFSETS)
ENDING_OPTIONS = (ENDING_TIMESTAMP, ENDING_OFFSETS_BY_TIMESTAMP, ENDING_OFFSETS)
_TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1700000000000,"1":1700000000000}}'
DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's default: spark.network.timeout, 120 s
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000  # Spark's DEFAULT_MAX_TRIGGER_DELAY, 15m
#: Options only a streaming read uses: a batch read logs that it ignores them.
TRIGGER_OPTIONS = (MAX_OFFSETS_PER_TRIGGER, MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY)
#: Milliseconds per unit of a duration (Spark's JavaUtils.timeStringAs suffixes).
_DURATION_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000,
                      "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"([0-9]+)([a-z]+)?")

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
#: Every option the source reads or refuses, lower-cased: anything else is unknown.
KNOWN_OPTIONS = frozenset(name.lower() for name in (
    BOOTSTRAP_SERVERS, KAFKA_BOOTSTRAP_SERVERS, *STRATEGY_OPTIONS, *STARTING_OPTIONS,
    *ENDING_OPTIONS, STARTING_TIMESTAMP_STRATEGY, *TRIGGER_OPTIONS, FAIL_ON_DATA_LOSS,
    MIN_PARTITIONS, MAX_RECORDS_PER_PARTITION, INCLUDE_HEADERS, POLL_TIMEOUT_MS,
    *UNSUPPORTED_KAFKA_OPTIONS, ISOLATION_LEVEL))


class InvalidOptionError(ValueError):
    """A ringlog source option with a bad value, or options that conflict (the message names
    the option)."""


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    """Validated options of one ``ringlog`` read (module doc). ``starting`` / ``ending``:
    ``"earliest"``, ``"latest"``, a ``{TopicPartition: offset}`` dict (-2 earliest,
    -1 latest), or a ByTimestamp; ``ending`` is None for streaming."""

    bootstrap_servers: str
    strategy: object
    starting: object
    ending: object = None
    max_offsets_per_trigger: int = None
    min_offsets_per_trigger: int = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    fail_on_data_loss: bool = True
    min_partitions: int = None
    max_records_per_partition: int = None
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    isolation_level: str = "read_uncommitted"


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


def duration_ms(text):
    """Milliseconds of a duration as Spark writes them (``Utils.timeStringAsMs``): a whole
    number with a unit us, ms, s, m or min, h, d, or none for milliseconds; ValueError
    otherwise."""
    match = _DURATION.fullmatch(str(text).strip().lower())
    unit = match and (match.group(2) or "ms")
    if unit not in _DURATION_UNITS_MS:
        raise ValueError(f"not a duration: {text!r}")
    return int(int(match.group(1)) * _DURATION_UNITS_MS[unit])


def _duration_option(options, name, default_ms):
    raw = _get(options, name)
    if raw is None:
        return default_ms
    try:
        return duration_ms(raw)
    except ValueError:
        raise InvalidOptionError(
            f"option '{name}' must be a duration such as 500ms, 30s, 15m or 1h (units us, "
            f"ms, s, m or min, h, d; a bare number is milliseconds), found {raw!r}") from None


def _warn_unknown(options):
    """Log the options (as the user spelt them) the source does not know (module doc): a
    WARNING per unknown key, one DEBUG line for Kafka consumer settings."""
    unknown = sorted((key for key in options if key.lower() not in KNOWN_OPTIONS), key=str.lower)
    kafka = [key for key in unknown if key.lower().startswith("kafka.")]
    if kafka:
        log.debug("Kafka consumer options the ringlog source has no use for: %s",
                  ", ".join(kafka))
    for key in unknown:
        if key not in kafka:
            log.warning("option '%s' is not an option of the ringlog source and is ignored "
                        "(its options are Spark's Kafka source options, listed in the "
                        "README's Spark section)", key)


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


def _timestamp(options, name):
    """Option ``name``: one timestamp in ms, >= 0."""
    raw = _get(options, name)
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidOptionError(f"option '{name}' must be a timestamp in milliseconds (a "
                                 f"whole number >= 0), found {raw!r}")
    return value


def _partition_timestamps(options, name, strategy):
    """Option ``name``: ``{TopicPartition: ms}`` of partitions ``strategy`` reads."""
    raw = _get(options, name)
    try:
        timestamps = parse_partition_offsets(raw.strip())
    except OffsetsFormatError:
        raise InvalidOptionError(f"option '{name}': Expected e.g. {_TIMESTAMPS_EXAMPLE}, "
                                 f"got {raw}") from None
    if not timestamps:
        raise InvalidOptionError(f"option '{name}' names no partition: {raw!r}")
    for tp, timestamp in sorted(timestamps.items()):
        if timestamp < 0:
            raise InvalidOptionError(f"option '{name}': timestamp {timestamp} of "
                                     f"{_describe_tp(tp)} must be >= 0 (milliseconds)")
        if not strategy.reads_topic(tp.topic):
            raise InvalidOptionError(f"option '{name}' names topic {tp.topic!r}, which the "
                                     f"query does not read ({strategy})")
    return timestamps


def _on_no_match(options):
    """``startingOffsetsByTimestampStrategy``: error (default) or latest."""
    raw = _get(options, STARTING_TIMESTAMP_STRATEGY)
    if raw is None:
        return ON_NO_MATCH_ERROR
    value = raw.strip().lower()
    if value not in STRATEGIES:
        raise InvalidOptionError(f"option '{STARTING_TIMESTAMP_STRATEGY}' must be one of "
                                 f"{', '.join(STRATEGIES)}, found {raw!r}")
    return value


def _limit(options, names, default, strategy, on_no_match):
    """Where a read starts or ends from ``names`` (STARTING_OPTIONS or ENDING_OPTIONS): the
    first one given wins, as in Spark; ``default`` when none is."""
    timestamp, by_timestamp, offsets = names
    if _get(options, timestamp) is not None:
        return ByTimestamp(_timestamp(options, timestamp), on_no_match, timestamp)
    if _get(options, by_timestamp) is not None:
        return ByTimestamp(_partition_timestamps(options, by_timestamp, strategy), on_no_match,
                           by_timestamp)
    return _offsets(options, offsets, default)


def _starting(options, strategy, default):
    return _limit(options, STARTING_OPTIONS, default, strategy, _on_no_match(options))


def _ending(options, strategy, default):
    return _limit(options, ENDING_OPTIONS, default, strategy, ON_NO_MATCH_LATEST)


def _general(options):
    """Checks shared by batch and streaming reads (Spark's validateGeneralOptions)."""
    for name, why in UNSUPPORTED_KAFKA_OPTIONS.items():
        if name in options:
            raise InvalidOptionError(f"Kafka option '{name}' is not supported. {why}")
    max_offsets = _positive_int(options, MAX_OFFSETS_PER_TRIGGER)
    min_offsets = _positive_int(options, MIN_OFFSETS_PER_TRIGGER)
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise InvalidOptionError(
            f"option '{MIN_OFFSETS_PER_TRIGGER}' ({min_offsets}) is higher than option "
            f"'{MAX_OFFSETS_PER_TRIGGER}' ({max_offsets})")
    return dict(
        bootstrap_servers=_bootstrap_servers(options),
        strategy=_strategy(options),
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=_duration_option(options, MAX_TRIGGER_DELAY,
                                              DEFAULT_MAX_TRIGGER_DELAY_MS),
        min_partitions=_positive_int(options, MIN_PARTITIONS, "must be positive"),
        max_records_per_partition=_positive_int(options, MAX_RECORDS_PER_PARTITION,
                                                "must be positive"),
        fail_on_data_loss=_boolean(options, FAIL_ON_DATA_LOSS, True),
        include_headers=_boolean(options, INCLUDE_HEADERS, False),
        poll_timeout_ms=_positive_int(options, POLL_TIMEOUT_MS) or DEFAULT_POLL_TIMEOUT_MS,
        isolation_level=_isolation_level(options),
    )


def _isolation_level(options):
    """``kafka.isolation.level`` (the Kafka consumer's isolation.level, which Spark's
    Kafka source hands to its consumers): read_uncommitted (Kafka's default) or
    read_committed."""
    raw = _get(options, ISOLATION_LEVEL)
    if raw is None:
        return ISOLATION_LEVELS[0]
    value = raw.strip().lower()
    if value not in ISOLATION_LEVELS:
        raise InvalidOptionError(f"option '{ISOLATION_LEVEL}' must be one of "
                                 f"{', '.join(ISOLATION_LEVELS)}, found {raw!r}")
    return value


def _describe_tp(tp):
    return f"{tp.topic}-{tp.partition}"


def parse_batch_options(options):
    """SourceOptions of ``spark.read.format("ringlog")``; InvalidOptionError naming the
    option (Spark's validateBatchOptions and checkOffsetLimitValidity). Spark calls it once
    per query (``reader()``), so unknown options are logged once per query."""
    given, options = options, _lower(options)
    general = _general(options)
    starting = _starting(options, general["strategy"], "earliest")
    if starting == "latest":
        raise InvalidOptionError(f"option '{STARTING_OFFSETS}': starting offset can't be "
                                 f"latest for batch queries")
    if isinstance(starting, dict):
        for tp, offset in starting.items():
            if offset == LATEST:
                raise InvalidOptionError(f"option '{STARTING_OFFSETS}' for "
                                         f"{_describe_tp(tp)} can't be latest (-1) for "
                                         f"batch queries")
    ending = _ending(options, general["strategy"], "latest")
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
    for name in TRIGGER_OPTIONS:
        if _get(options, name) is not None:
            log.warning("%s option ignored in batch queries", name)
    _warn_unknown(given)
    return SourceOptions(starting=starting, ending=ending, **general)


def parse_stream_options(options):
    """SourceOptions of ``spark.readStream.format("ringlog")``; InvalidOptionError naming
    the option (Spark's validateStreamOptions). Spark calls it once per query
    (``streamReader()``), so unknown options are logged once per query."""
    given, options = options, _lower(options)
    for name in ENDING_OPTIONS:
        if _get(options, name) is not None:
            raise InvalidOptionError(f"option '{name}' is not valid in streaming queries")
    general = _general(options)
    starting = _starting(options, general["strategy"], "latest")
    _warn_unknown(given)
    return SourceOptions(starting=starting, **general)


def validate_common(options):
    """The checks both kinds of read share, and the offsets' syntax; ``schema()`` runs them
    so that a bad option fails at ``load()``, as with Spark's Kafka source."""
    options = _lower(options)
    strategy = _general(options)["strategy"]
    _starting(options, strategy, None)
    _ending(options, strategy, None)
