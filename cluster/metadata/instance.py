"""The running instance of a data directory: one start of its cluster, told apart from a copy.

``cp -a D D2`` gives D2 the cluster id of D. Each start gets its own shared-memory namespace
(``<cluster-id>.<token>``, ``data_dir.new_shm_namespace``), so the two never share a name;
still, one machine runs one instance of a cluster id at a time: a second one is refused at
start, naming the directory of the first (the copy is a cluster of the same id — its topic
ids, its metadata — and tools and clients that find one by its id must find one).

The record: ``/ringlog.<cluster-id>.<token>.instance``, created by the supervisor at start and
unlinked by its stop (or by the next start's sweep, once its process is gone)::

    0  magic (i64)            INSTANCE_MAGIC: b"RLOGINS" + version 1
    8  pid (i64)              the supervisor's pid, written last ("ready")
    16 start time (i64)       its start time (shm_ring.liveness: pid-reuse-safe)
    24 device (i64)           st_dev of D
    32 inode (i64)            st_ino of D (with st_dev: D itself, whatever path names it)
    40 path length (i64)      bytes of the path that follow
    48 path (UTF-8)           D as the supervisor was given it (absolute)

``running_elsewhere(cluster_id, data_dir)`` finds the live records of this user (other users'
objects are not ours to trust) whose directory is not D. Owner: the supervisor thread that
creates it; any process may read.
"""
from __future__ import annotations

import os
import struct

from cluster.metadata.data_dir import instance_of
from shm_ring.liveness import current_process, is_alive
from shm_ring.naming import SharedRegion, cluster_of, foreign_owner, list_objects, object_name

INSTANCE_PART = "instance"
"""Last name component of the record."""

INSTANCE_MAGIC = 0x524C_4F47_494E_5301
"""b'RLOGINS' + version 1."""

_HEADER = struct.Struct("<qqqqqq")  # magic, pid, start time, device, inode, path length
_PID_OFFSET = 8
MAX_PATH = 4096
"""Longest path the record holds (PATH_MAX)."""


def instance_name(namespace: str) -> str:
    """``/ringlog.<namespace>.instance``."""
    return object_name(namespace, INSTANCE_PART)


class Instance:
    """The record of this start (``create``); ``close()`` unmaps and unlinks it."""

    def __init__(self, region: SharedRegion) -> None:
        self._region = region

    @classmethod
    def create(cls, namespace: str, data_dir: str) -> Instance:
        path = os.fsencode(data_dir)[:MAX_PATH]
        device, inode = instance_of(data_dir)
        region = SharedRegion.create(instance_name(namespace), _HEADER.size + MAX_PATH)
        try:
            pid, start_time = current_process()
            region.buf[_HEADER.size:_HEADER.size + len(path)] = path
            _HEADER.pack_into(region.buf, 0, INSTANCE_MAGIC, 0, start_time, device, inode,
                              len(path))
            struct.pack_into("<q", region.buf, _PID_OFFSET, pid)  # last: ready
        except BaseException:
            region.unlink()
            region.close()
            raise
        return cls(region)

    def close(self) -> None:
        """Unlink and unmap; safe to call twice."""
        self._region.unlink()
        self._region.close()


def running_elsewhere(cluster_id: str, data_dir: str) -> list[tuple[str, int]]:
    """``(directory, supervisor pid)`` of every live instance of ``cluster_id`` (a bare id)
    this user runs from a directory other than ``data_dir``."""
    here = instance_of(data_dir)
    found = []
    suffix = "." + INSTANCE_PART
    for name in list_objects(cluster_of(cluster_id)):
        if not name.endswith(suffix) or foreign_owner(name, False) is not None:
            continue
        try:
            region = SharedRegion.open(name)
        except (FileNotFoundError, PermissionError):
            continue  # gone meanwhile, or another user's
        try:
            if region.size < _HEADER.size:
                continue
            magic, pid, start_time, device, inode, length = _HEADER.unpack_from(region.buf)
            if (magic != INSTANCE_MAGIC or not pid or (device, inode) == here
                    or not 0 <= length <= region.size - _HEADER.size
                    or not is_alive(pid, start_time)):
                continue
            path = bytes(region.buf[_HEADER.size:_HEADER.size + length])
            found.append((os.fsdecode(path), pid))
        finally:
            region.close()
    return sorted(found)
