"""Setting a damaged log's bad bytes aside, so that the replica can heal from its leader.

A log that fails its checks below the recovery point (a byte flipped on disk: ``segments.
log``'s "Damaged bytes") is offline and deletes nothing. Once another replica leads the
partition with every acknowledged record, the broker heals this one (``replica_proc.
replica_manager``): ``set_aside_damage(path)`` finds the first batch of the log that
fails ``Segment.verify`` (framing, CRC-32C, offsets), and

- renames that segment's ``.log`` to ``<name>.log.damaged`` (``.damaged-2``, ... if that
  name is taken) and every later segment's the same way: kept, never deleted, for the
  operator (``ringlog dump-log`` reads them);
- writes the good batches before the damage back under the segment's own name (a copy of
  its first bytes, fsynced), so the log ends at its last good batch;
- deletes the indexes of those segments (derived data, rebuilt by the next open), the
  clean-shutdown marker, and moves the recovery point checkpoint down to the damaged
  segment's base offset: the next open validates the rest batch by batch.

The replica then opens the log again, as a follower, and fetches the rest from the
leader. Nothing of the log changes when no batch fails its checks (returns None).

Owner: the thread that owns the log's directory while the log is closed (the broker's
loop thread).
"""
from __future__ import annotations

import logging
import os

from segments import durability
from segments.checkpoint import OffsetCheckpoint, fsync_directory
from segments.errors import CorruptSegmentError
from segments.index import fsync_file
from segments.log import (
    CLEAN_SHUTDOWN_MARKER,
    RECOVERY_POINT_CHECKPOINT,
    is_segment_name,
)
from segments.log_config import LogConfig
from segments.segment import (
    LOG_SUFFIX,
    Segment,
    base_offset_from_name,
    free_damaged_name,
    segment_paths,
    txn_index_path,
)

log = logging.getLogger(__name__)

_COPY_CHUNK = 1 << 20


def set_aside_damage(path):
    """Set aside the damage of the log in ``path`` (see the module doc); return
    ``(offset the log now ends at, [paths set aside])``, or None if every batch passes."""
    bases = sorted(base_offset_from_name(n) for n in os.listdir(path)
                   if is_segment_name(n, LOG_SUFFIX))
    bad = None
    for n, base in enumerate(bases):
        segment = Segment.open(path, base, LogConfig(), 0)
        try:
            segment.next_base_offset = bases[n + 1] if n + 1 < len(bases) else None
            segment.verify()
        except CorruptSegmentError as exc:
            bad = (n, getattr(exc, "position", 0), exc)
            break
        finally:
            segment.close()
    if bad is None:
        return None
    n, position, exc = bad
    set_aside = []
    for base in bases[n:]:
        log_path = segment_paths(path, base)[0]
        aside = free_damaged_name(log_path)
        os.rename(log_path, aside)
        set_aside.append(aside)
        for derived in (*segment_paths(path, base)[1:], txn_index_path(path, base)):
            try:
                os.unlink(derived)
            except FileNotFoundError:
                pass
    base = bases[n]
    _copy_prefix(set_aside[0], segment_paths(path, base)[0], position)
    try:
        os.unlink(os.path.join(path, CLEAN_SHUTDOWN_MARKER))
    except FileNotFoundError:
        pass
    checkpoint = OffsetCheckpoint(os.path.join(path, RECOVERY_POINT_CHECKPOINT))
    checkpoint.write({os.path.basename(os.path.normpath(path)): base})
    fsync_directory(path)
    log.warning("log %s: %s; set aside %s, the log keeps the %d bytes of good batches "
                "before the damage in segment %d", path, exc, ", ".join(set_aside),
                position, base)
    return base, set_aside


def _copy_prefix(source, target, size):
    """Write the first ``size`` bytes of ``source`` to the new file ``target``, fsynced."""
    src = os.open(source, os.O_RDONLY)
    try:
        dst = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            copied = 0
            while copied < size:
                chunk = os.pread(src, min(_COPY_CHUNK, size - copied), copied)
                if not chunk:
                    break
                os.pwrite(dst, chunk, copied)
                copied += len(chunk)
            fsync_file(durability.fsync, dst, target)
        finally:
            os.close(dst)
    finally:
        os.close(src)
