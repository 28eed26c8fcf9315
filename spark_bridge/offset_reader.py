"""The driver's view of the cluster: which partitions a query reads and where they begin
and end (Spark's ``KafkaOffsetReader``).

One ``KafkaConsumer`` without a group answers the metadata and ListOffsets questions:
``partitions()`` from the query's ConsumerStrategy, ``earliest`` (log start offsets) and
``latest`` (high watermarks: only committed records are ever read; last stable offsets
under read_committed), and the resolution of ``startingOffsets`` / ``endingOffsets`` and
the timestamp options (``timestamp_offsets``) to real offsets. It never fetches records.

Owner: the reader that made it (Spark calls a data source reader from one thread); the
consumer is opened on first use and closed by ``close()`` (safe twice) — a ``with`` block
closes it for the batch reader, the stream reader's ``stop()`` for streaming. Not pickled:
``__getstate__`` leaves the consumer behind.
"""
from __future__ import annotations

from spark_bridge.offsets import EARLIEST, LATEST
from spark_bridge.options import InvalidOptionError
from spark_bridge.timestamp_offsets import ByTimestamp, offsets_found

#: Where the consumer's ListOffsets and metadata calls give up (ms).
API_TIMEOUT_MS = 60_000


def open_consumer(bootstrap_servers, **config):
    """A KafkaConsumer without a group for the ringlog source: no automatic resets (the
    source decides what a missing offset means), no topic creation. Its stats page says
    "spark-reader" (a Spark Python worker), unless the process declared another role (the
    bridge itself)."""
    from cluster import KafkaConsumer
    from cluster.stats.publisher import process_role, set_process_role

    if process_role() is None:
        set_process_role("spark-reader")

    return KafkaConsumer(bootstrap_servers=bootstrap_servers, auto_offset_reset="none",
                         enable_auto_commit=False, allow_auto_create_topics=False,
                         client_id="ringlog-spark", **config)


class OffsetReader:
    """Partitions and offsets of ``options`` (a SourceOptions) for planning (module doc).
    ``consumer``: one to use instead of opening one (tests); ``close()`` closes it too."""

    def __init__(self, options, consumer=None):
        self._options = options
        self._consumer = consumer

    @property
    def consumer(self):
        if self._consumer is None:
            self._consumer = open_consumer(self._options.bootstrap_servers,
                                           default_api_timeout_ms=API_TIMEOUT_MS,
                                           isolation_level=self._options.isolation_level)
        return self._consumer

    def partitions(self):
        """The partitions the strategy names now, sorted."""
        return self._options.strategy.partitions(self.consumer)

    def earliest(self, partitions):
        """``{TopicPartition: log start offset}``."""
        partitions = list(partitions)
        return dict(self.consumer.beginning_offsets(partitions)) if partitions else {}

    def latest(self, partitions):
        """``{TopicPartition: high watermark}``: the offset after the last committed record
        (the last stable offset under read_committed)."""
        partitions = list(partitions)
        return dict(self.consumer.end_offsets(partitions)) if partitions else {}

    def resolve(self, spec, partitions, option, exact):
        """``spec`` (``"earliest"``, ``"latest"``, ``{TopicPartition: offset}`` with -2 /
        -1, or a ByTimestamp) as ``{TopicPartition: offset}`` over ``partitions``. With JSON
        offsets, the partitions named must be exactly ``partitions`` (``exact``, batch
        queries) or some of them (streaming: the others are picked up later as new
        partitions, from their earliest offset); with JSON timestamps, exactly
        ``partitions`` either way — Spark's rules; InvalidOptionError naming ``option``
        (a ByTimestamp's own option) otherwise."""
        if spec == "earliest":
            return self.earliest(partitions)
        if spec == "latest":
            return self.latest(partitions)
        if isinstance(spec, ByTimestamp):
            if isinstance(spec.timestamps, dict):
                _check_named(spec.timestamps, partitions, spec.option or option,
                             exact=True, hint="")
            return self.by_timestamp(spec, partitions)
        _check_named(spec, partitions, option, exact)
        earliest = self.earliest(tp for tp, o in spec.items() if o == EARLIEST)
        latest = self.latest(tp for tp, o in spec.items() if o == LATEST)
        return {tp: earliest[tp] if o == EARLIEST else latest[tp] if o == LATEST else o
                for tp, o in sorted(spec.items())}

    def by_timestamp(self, spec, partitions):
        """``{TopicPartition: offset}`` of ByTimestamp ``spec`` over ``partitions``: one
        ListOffsets by timestamp, and the latest offsets of the partitions without a
        match (``timestamp_offsets.offsets_found`` decides what those get)."""
        timestamps = spec.for_partitions(partitions)
        if not timestamps:
            return {}
        found = self.consumer.offsets_for_times(timestamps)
        return offsets_found(timestamps, found,
                             self.latest(tp for tp in timestamps if found.get(tp) is None),
                             spec.on_no_match)

    def close(self):
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getstate__(self):
        return {"_options": self._options, "_consumer": None}

    def __repr__(self):
        return f"OffsetReader({self._options.strategy}, {self._options.bootstrap_servers!r})"


def _check_named(named, partitions, option, exact,
                 hint=" (use -2 for earliest, -1 for latest)"):
    """InvalidOptionError naming ``option`` unless ``named`` (TopicPartitions) are exactly
    ``partitions`` (``exact``) or some of them."""
    named, known = set(named), set(partitions)
    if (named != known) if exact else not named <= known:
        raise InvalidOptionError(
            f"option '{option}' names partitions {_names(named)} but the query reads "
            f"{_names(known)}: {'name every partition' if exact else 'name only those'}"
            f"{hint}")


def _names(partitions):
    return "[" + ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(partitions)) + "]"

