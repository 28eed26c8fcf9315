"""The shipper's checkpoint file: for each file it follows, the byte position up to which
every line is acknowledged by the cluster.

Layout (text)::

    ringlog-ship-checkpoint 1 <crc32 of the body, 8 hex digits>\\n
    <body: JSON {"files": [{"id", "dev", "ino", "fingerprint", "fingerprint_length",
                            "path", "position", "skipping"}, ...]}>

``path`` is where the file was first seen (its ``{file}`` in keys), ``skipping`` says the
position is inside the rest of a line ``--max-line-bytes truncate`` cut. ``store`` writes a
temporary file beside it, fsyncs it, renames it over the checkpoint and fsyncs the
directory: a crash leaves the old checkpoint or the new one, never a torn one. ``load``
checks the header and the CRC: a damaged checkpoint is an error naming the file (the
shipper refuses to start rather than re-send or skip what it cannot know), never replaced.

Owner: the shipper's thread.
"""
from __future__ import annotations

import json
import os
import zlib
from typing import NamedTuple

MAGIC = "ringlog-ship-checkpoint"
VERSION = 1


class CheckpointError(Exception):
    """The checkpoint file cannot be read as one (its message names the file and why)."""


class Entry(NamedTuple):
    """One file's acknowledged position."""
    id: str
    dev: int
    ino: int
    fingerprint: str
    fingerprint_length: int
    path: str
    position: int
    skipping: bool = False


def load(path: str) -> dict[str, Entry]:
    """{file id: Entry} of the checkpoint at ``path``; {} when there is none."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise CheckpointError(f"cannot read the checkpoint {path!r}: {exc.strerror}") from None
    header, _, body = raw.partition(b"\n")
    fields = header.split(b" ")
    if len(fields) != 3 or fields[0] != MAGIC.encode() or fields[1] != str(VERSION).encode():
        raise CheckpointError(f"the checkpoint {path!r} is not a ringlog ship checkpoint "
                              f"(version {VERSION}): its first line is {header[:80]!r}")
    stored = fields[2].decode("ascii", "replace")
    computed = f"{zlib.crc32(body):08x}"
    if stored != computed:
        raise CheckpointError(f"the checkpoint {path!r} is damaged: stored CRC {stored}, "
                              f"computed {computed} (move it away to start over, knowing "
                              f"the shipper then re-reads by --from)")
    try:
        files = json.loads(body)["files"]
        entries = [Entry(**item) for item in files]
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"the checkpoint {path!r} has a bad body: {exc}") from None
    return {entry.id: entry for entry in entries}


def store(path: str, entries) -> None:
    """Write ``entries`` (Entry objects) to ``path`` atomically (module doc)."""
    body = json.dumps({"files": [e._asdict() for e in entries]}, indent=1).encode()
    data = f"{MAGIC} {VERSION} {zlib.crc32(body):08x}\n".encode() + body
    directory = os.path.dirname(os.path.abspath(path))
    temporary = f"{path}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
