"""Offsets as Spark's Kafka source writes them: JSON maps from topic to partition to offset.

Two JSON forms, both Spark's (``JsonUtils``):

* partition offsets, ``{"topicA": {"0": 23, "1": -1}, "topicB": {"0": -2}}``: the
  ``startingOffsets`` / ``endingOffsets`` options, where -2 means the earliest offset and -1
  the latest; and, with real offsets only, the streaming offsets this source hands to Spark
  (``{"topic": {"partition": next_offset}}``: the offset of the next record to read, as
  ``KafkaConsumer.position()``);
* partitions, ``{"topicA": [0, 1], "topicB": [2, 4]}``: the ``assign`` option.

Offsets inside the source are ``{TopicPartition: int}``. ``to_json_dict`` writes them in
one order (topics sorted, partitions by number, as Spark sorts them), so the same offsets
always serialize to the same text: Spark compares and stores offsets as JSON.

Pure functions; any thread.
"""
from __future__ import annotations

import json

from cluster.structs import TopicPartition

#: ``startingOffsets`` / ``endingOffsets`` JSON value for a partition's earliest offset.
EARLIEST = -2
#: ... and for its latest offset (the high watermark).
LATEST = -1

_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_PARTITIONS_EXAMPLE = '{"topicA":[0,1],"topicB":[0,1]}'


class OffsetsFormatError(ValueError):
    """An offsets or partitions JSON text that is not of Spark's form."""


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def parse_partition_offsets(text):
    """``{TopicPartition: offset}`` from partition-offsets JSON; OffsetsFormatError naming
    Spark's example and the text found."""
    try:
        parsed = json.loads(text)
        if not isinstance(parsed, dict):
            raise ValueError(parsed)
        out = {}
        for topic, offsets in parsed.items():
            if not isinstance(offsets, dict):
                raise ValueError(offsets)
            for partition, offset in offsets.items():
                if not _is_int(offset):
                    raise ValueError(offset)
                out[TopicPartition(topic, int(partition))] = offset
        return out
    except ValueError:
        raise OffsetsFormatError(f"Expected e.g. {_OFFSETS_EXAMPLE}, got {text}") from None


def parse_partitions(text):
    """The TopicPartitions of partitions JSON, sorted; OffsetsFormatError naming Spark's
    example and the text found."""
    try:
        parsed = json.loads(text)
        if not isinstance(parsed, dict):
            raise ValueError(parsed)
        out = set()
        for topic, partitions in parsed.items():
            if not isinstance(partitions, list) or not all(map(_is_int, partitions)):
                raise ValueError(partitions)
            out.update(TopicPartition(topic, partition) for partition in partitions)
        return sorted(out)
    except ValueError:
        raise OffsetsFormatError(f"Expected e.g. {_PARTITIONS_EXAMPLE}, got {text}") from None


def to_json_dict(offsets):
    """``{TopicPartition: offset}`` -> ``{"topic": {"partition": offset}}``, topics sorted,
    partitions by number (what Spark gets as this source's offset)."""
    out = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def from_json_dict(offsets):
    """``{"topic": {"partition": offset}}`` (as Spark hands offsets back) ->
    ``{TopicPartition: offset}``."""
    return {TopicPartition(topic, int(partition)): int(offset)
            for topic, partitions in offsets.items()
            for partition, offset in partitions.items()}

