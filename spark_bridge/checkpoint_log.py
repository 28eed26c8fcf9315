"""Where a bridge's query stands, read from its Spark checkpoint directory.

Spark keeps two logs there, one file per micro-batch, named by the batch id (Spark's
``OffsetSeqLog`` and ``CommitLog``; hidden ``.<id>.crc`` files beside them are Hadoop's):

* ``offsets/<id>``, written before the batch runs: a version line (``v1``), a line of
  JSON metadata, then one line per source with the offsets the batch reads up to — for the
  ringlog source Spark's Kafka form, ``{"topic":{"0":120,"1":118}}``;
* ``commits/<id>``, written once the batch is in the sink.

So the last committed batch is the largest id in ``commits/``, and its end offsets are the
source line of ``offsets/<that id>``; a planned batch without a commit runs again first
when the query restarts. Read-only; any thread, Spark running or not.
"""
from __future__ import annotations

import dataclasses
import json
import os

from spark_bridge.starting_offsets import COMMITS_DIR

#: Spark's offset log in a checkpoint (one file per planned micro-batch).
OFFSETS_DIR = "offsets"
#: Lines of an offsets file before the first source's offsets: version, metadata.
OFFSETS_HEADER_LINES = 2


@dataclasses.dataclass(frozen=True)
class Progress:
    """``committed``: id of the last committed batch (None: none yet); ``end_offsets``: its
    source's offsets as parsed JSON (None without a committed batch); ``planned``: the
    largest batch id in the offset log (None: none planned)."""

    committed: int | None
    end_offsets: dict | None
    planned: int | None


def batch_ids(directory):
    """The batch ids of the files in ``directory`` (empty if it does not exist)."""
    try:
        return sorted(int(name) for name in os.listdir(directory) if name.isdigit())
    except FileNotFoundError:
        return []


def read_progress(checkpoint):
    """The Progress of the query whose checkpoint directory is ``checkpoint``. ValueError
    naming the file when a committed batch's offsets file is not of Spark's form."""
    committed = batch_ids(os.path.join(checkpoint, COMMITS_DIR))
    planned = batch_ids(os.path.join(checkpoint, OFFSETS_DIR))
    if not committed:
        return Progress(None, None, planned[-1] if planned else None)
    path = os.path.join(checkpoint, OFFSETS_DIR, str(committed[-1]))
    with open(path, encoding="utf-8") as file:
        lines = file.read().splitlines()
    try:
        end_offsets = json.loads(lines[OFFSETS_HEADER_LINES])
    except (IndexError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: expected Spark's offsets file (version, metadata, then a "
                         f"line of source offsets), found {lines[:OFFSETS_HEADER_LINES + 1]}"
                         ) from exc
    return Progress(committed[-1], end_offsets, planned[-1] if planned else None)
