"""Spark's file sink metadata log: which files of a sink directory hold committed rows.

Spark's file sink (parquet, json, csv) writes each micro-batch's part files into the sink
directory, then commits the batch by writing ``DIR/_spark_metadata/<batch id>``::

    v1
    {"path":"file:///DIR/part-00000-<uuid>-c000.snappy.parquet","size":392,...,"action":"add"}
    {"path":"file:///DIR/part-00001-<uuid>-c000.snappy.parquet","size":411,...,"action":"add"}

Every ``spark.sql.streaming.fileSink.log.compactInterval`` batches (10) the entry is written
as ``<batch id>.compact`` instead and lists the files of every batch so far; older entries
are deleted some minutes later. Names starting with a dot are Spark's temporary and
checksum files. A part file in DIR that no entry lists was written by an attempt that did
not commit (the bridge was killed); Spark wrote the batch again, so such files must not be
read — Spark's own reader skips them, and so do the functions here.

Pure reads of the directory; any thread may call them. The log is written by one streaming
query; a batch appears atomically (Spark writes the entry to a temporary file and renames it).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import urllib.parse

#: The metadata log's directory inside a file sink's directory.
METADATA_DIR = "_spark_metadata"
#: The first line of every entry (Spark's log version).
VERSION_LINE = "v1"

_ENTRY_NAME = re.compile(r"(\d+)(\.compact)?\Z")


class SinkLogError(ValueError):
    """The metadata log is missing or holds something this reader does not understand."""


@dataclasses.dataclass(frozen=True)
class CommittedBatch:
    """One committed micro-batch: its id, the files it added (local paths), and when its
    log entry was written (``committed_ns``, the entry's modification time, nanoseconds
    since the epoch) — the moment its rows became visible to readers of the sink."""

    batch_id: int
    files: tuple
    committed_ns: int


def committed_batches(sink_dir):
    """The committed micro-batches of the file sink in ``sink_dir``, by batch id, as far back
    as the log still has entries (the oldest listed batch may stand for several compacted
    ones). SinkLogError when ``sink_dir`` has no metadata log."""
    log_dir = os.path.join(sink_dir, METADATA_DIR)
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        raise SinkLogError(f"{sink_dir!r} has no {METADATA_DIR} directory: not the output of "
                           f"a Spark file sink (or no batch committed yet)") from None
    entries = sorted((int(m.group(1)), name) for name in names
                     if (m := _ENTRY_NAME.match(name)))
    batches, seen = [], set()
    for batch_id, name in entries:
        path = os.path.join(log_dir, name)
        listed = _read_entry(path)
        added = tuple(f for f in listed if f not in seen)
        seen.update(added)
        batches.append(CommittedBatch(batch_id, added, os.stat(path).st_mtime_ns))
    return batches


def committed_files(sink_dir):
    """Local paths of every file the sink committed, oldest batch first: what Spark reads
    from ``sink_dir``."""
    return [f for batch in committed_batches(sink_dir) for f in batch.files]


def _read_entry(path):
    with open(path, encoding="utf-8") as file:
        lines = file.read().splitlines()
    if not lines or lines[0] != VERSION_LINE:
        raise SinkLogError(f"{path!r}: expected {VERSION_LINE!r} on the first line, found "
                           f"{lines[0] if lines else ''!r}")
    files = []
    for line in lines[1:]:
        entry = json.loads(line)
        if entry["action"] == "add":
            files.append(_local_path(entry["path"]))
    return files


def _local_path(uri):
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme not in ("file", ""):
        raise SinkLogError(f"sink file {uri!r} is not on the local file system")
    return urllib.parse.unquote(parsed.path)
