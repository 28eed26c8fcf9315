"""Offsets given as record timestamps: Spark's Kafka source options ``startingTimestamp``,
``startingOffsetsByTimestamp``, ``endingTimestamp`` and ``endingOffsetsByTimestamp``
(Spark's ``GlobalTimestampRangeLimit`` / ``SpecificTimestampRangeLimit``).

``ByTimestamp`` is the parsed option: one timestamp (ms) for every partition the query
reads, or ``{TopicPartition: timestamp}`` naming each of them. The offset reader looks each
timestamp up with ListOffsets (``KafkaConsumer.offsets_for_times``: the earliest offset
whose record's timestamp is at or after it; under read_committed, below the last stable
offset) and ``offsets_found`` turns the answers into offsets, as Spark does when none
matches: a starting offset fails naming the topic-partition and the timestamp, or is the
latest offset under ``startingOffsetsByTimestampStrategy=latest``; an ending offset is the
latest offset.

Immutable values and pure functions; any thread (pickled to Spark's Python workers inside
SourceOptions).
"""
from __future__ import annotations

import dataclasses

#: ``startingOffsetsByTimestampStrategy`` values (Spark's StrategyOnNoMatchStartingOffset).
ERROR = "error"
LATEST = "latest"
STRATEGIES = (ERROR, LATEST)


class NoMatchingOffsetError(ValueError):
    """No record at or after a starting timestamp, under strategy ``error``."""


@dataclasses.dataclass(frozen=True)
class ByTimestamp:
    """Offsets by record timestamp (module doc). ``timestamps``: an int for every
    partition, or ``{TopicPartition: int}``; ``on_no_match``: ERROR or LATEST (a starting
    offset's strategy; an ending offset always takes LATEST); ``option``: the option it
    came from (None: unknown), for messages."""

    timestamps: object
    on_no_match: str = ERROR
    option: str = dataclasses.field(default=None, compare=False)

    def for_partitions(self, partitions):
        """``{TopicPartition: timestamp}`` over ``partitions``."""
        if isinstance(self.timestamps, dict):
            return {tp: self.timestamps[tp] for tp in partitions}
        return {tp: self.timestamps for tp in partitions}


def offsets_found(timestamps, found, latest, on_no_match):
    """``{TopicPartition: offset}`` from ``found`` (``offsets_for_times``' answer, None
    where no record matched) for ``timestamps`` ({TopicPartition: ms}): the offset found,
    else ``latest[tp]`` under LATEST, else NoMatchingOffsetError naming the partition and
    timestamp (Spark's message)."""
    out = {}
    for tp in sorted(timestamps):
        match = found.get(tp)
        if match is not None:
            out[tp] = match.offset
        elif on_no_match == LATEST:
            out[tp] = latest[tp]
        else:
            raise NoMatchingOffsetError(
                f"No offset matched from request of topic-partition {tp.topic}-"
                f"{tp.partition} and timestamp {timestamps[tp]}.")
    return out
