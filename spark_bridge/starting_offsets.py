"""Where a new bridge query starts: ``startingOffsets=latest`` pinned to offsets, once.

Spark asks a streaming source for its initial offset more than once before the first
micro-batch is committed: when it plans batch 0, when it runs it, and again in a new process
when the bridge restarts before batch 0 committed. "latest" resolved at each call moves
while records arrive, so batch 0 would start after where it was planned to (Spark's Kafka
source avoids this by writing its initial offsets into the checkpoint, ``sources/0/0``; a
Python data source is not told where the checkpoint is). So the bridge resolves "latest"
itself, the first time it starts a checkpoint, to the topic's end offsets as JSON
(``{"t":{"0":1200,"1":1187}}``; with read_committed, the last stable offsets: the ends
the source's micro-batches have), keeps that in the checkpoint directory, and passes the
same JSON every time until Spark has committed a batch (from then on Spark starts from its
own offsets and ignores ``startingOffsets``). "earliest" and JSON are passed as they are;
partitions created later start at their earliest offset, as the source does.

Functions for the bridge's main thread, before Spark starts.
"""
from __future__ import annotations

import json
import os

#: The file in the checkpoint directory holding the pinned starting offsets.
PINNED_FILE = "bridge-starting-offsets"
#: What a new query starts from when no startingOffsets is given (Spark's Kafka source).
DEFAULT = "latest"
#: Spark's commit log in a checkpoint: one file per finished micro-batch, named by its id.
COMMITS_DIR = "commits"


def resumes(checkpoint):
    """Whether Spark finished a micro-batch on ``checkpoint``: then it goes on from its own
    offsets and no startingOffsets applies."""
    try:
        return any(name.isdigit() for name in os.listdir(os.path.join(checkpoint, COMMITS_DIR)))
    except FileNotFoundError:
        return False


def pin_starting_offsets(checkpoint, bootstrap_servers, topic, spec=None,
                         isolation_level="read_uncommitted"):
    """The startingOffsets to pass for a query on ``checkpoint``: ``spec`` (default
    "latest"), with "latest" replaced by the offsets pinned in the checkpoint directory, or
    by the topic's end offsets now for ``isolation_level``, pinned there first (unless the
    topic has no partitions yet: then "latest" means every partition from its start, and
    is kept)."""
    spec = DEFAULT if spec is None else spec
    if spec.strip().lower() != "latest":
        return spec
    path = os.path.join(checkpoint, PINNED_FILE)
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except FileNotFoundError:
        pass
    ends = end_offsets(bootstrap_servers, topic, isolation_level)
    if not ends:
        return spec
    pinned = json.dumps({topic: {str(p): offset for p, offset in sorted(ends.items())}},
                        separators=(",", ":"))
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        file.write(pinned)
    os.replace(temporary, path)
    return pinned


def end_offsets(bootstrap_servers, topic, isolation_level="read_uncommitted"):
    """{partition: end offset} of ``topic`` now (high watermarks; read_committed: last
    stable offsets); empty if it has no partitions yet."""
    from cluster import KafkaConsumer, TopicPartition

    with KafkaConsumer(bootstrap_servers=bootstrap_servers,
                       isolation_level=isolation_level) as consumer:
        partitions = consumer.partitions_for_topic(topic) or set()
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
    return {tp.partition: offset for tp, offset in ends.items()}
