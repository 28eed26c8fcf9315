"""Names and lifecycle of ringlog's named POSIX objects.

Every object of a cluster is named ``/ringlog.<namespace>.<...>``: shared memory shows in
/dev/shm as ``ringlog.<namespace>.<...>``, a semaphore as ``sem.ringlog.<namespace>.<...>``.
The namespace of a running cluster is ``<cluster-id>.<token>``: the token is random, made
afresh by each cluster start and kept in the 0600 data directory, where its clients read it
(``cluster.metadata.data_dir``). Other users cannot guess the names of a cluster before it
starts (so cannot create them first), and a copy of a data directory, which has the same
cluster id, gets names of its own. A bare ``<cluster-id>`` namespace is what a broker made
without a supervisor (tests, benchmarks) uses.

Objects are created with mode 0600 (only the user that runs the cluster can map them). A
name that another user created first (squatted) cannot be used: creating or opening it
raises SquattedNameError, one line naming the object and its owner's uid; cleanup leaves
such objects alone (it deletes only what this user could have created).

Ownership: the process that creates an object unlinks it. close() drops this process's access
(mapping, descriptor, handle) and unlink() removes the name; they are distinct, and each is
safe to call twice. A create that fails halfway undoes what it did. After crashes,
cleanup_stale(cluster_id) removes whatever a cluster's dead processes left behind.

Names used by the transport (``<cluster>`` = the namespace, ``b<id>`` = broker id,
``c<pid>-<token>`` = one client connection)::

    /ringlog.<cluster>.b<id>.listener       listener: broker identity, doorbell flag, accept ring
    /ringlog.<cluster>.b<id>.doorbell       semaphore the broker waits on
    /ringlog.<cluster>.b<id>.c<pid>-<token>.req         request ring (client writes)
    /ringlog.<cluster>.b<id>.c<pid>-<token>.rsp         response ring (broker writes)
    /ringlog.<cluster>.b<id>.c<pid>-<token>.req.space   semaphore: client waits for room
    /ringlog.<cluster>.b<id>.c<pid>-<token>.rsp.data    semaphore: client waits for a response
    /ringlog.<cluster>.<stem>[.data|.space]             a standalone ring (shared_ring)
    /ringlog.<cluster>.stats.<pid>                      a process's stats page (cluster.stats)

A stats page belongs to its process, which may be a client that outlives a cluster start or
stop: cleanup_stale leaves the page of a running pid alone.
"""
from __future__ import annotations

import mmap
import os
import re

import posix_ipc

from shm_ring.liveness import process_start_time

PREFIX = "ringlog"
"""First component of every name."""

SHM_DIRECTORY = "/dev/shm"
"""Where Linux shows POSIX shared memory and semaphores (semaphores with a "sem." prefix)."""

SEMAPHORE_FILE_PREFIX = "sem."
"""Prefix Linux gives a named semaphore's file in SHM_DIRECTORY."""

MODE = 0o600
"""Permissions of every object: owner read/write only."""

_CLUSTER_ID = re.compile(r"[A-Za-z0-9_-]{1,64}(\.[0-9a-f]{32})?")
TOKEN_HEX = 32
"""Hex digits of a start token (128 random bits)."""
_PART = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
_NAME_MAX = 255 - len(SEMAPHORE_FILE_PREFIX)  # NAME_MAX, minus room for "sem."


def check_cluster_id(cluster_id: str) -> str:
    """Return cluster_id (a namespace) if it is 1-64 letters, digits, '_' or '-', optionally
    followed by ``.`` and a token of TOKEN_HEX hex digits; else raise ValueError."""
    if not isinstance(cluster_id, str) or not _CLUSTER_ID.fullmatch(cluster_id):
        raise ValueError(f"cluster id must be 1-64 characters of [A-Za-z0-9_-] (then"
                         f" optionally '.' and a {TOKEN_HEX}-hex-digit token), found"
                         f" {cluster_id!r}")
    return cluster_id


def namespace(cluster_id: str, token: str) -> str:
    """The namespace ``<cluster_id>.<token>`` of one start of a cluster."""
    return check_cluster_id(f"{cluster_id}.{token}")


def cluster_of(namespace: str) -> str:
    """The cluster id of a namespace (the namespace itself when it has no token)."""
    return check_cluster_id(namespace).split(".", 1)[0]


class SquattedNameError(PermissionError):
    """A name of ours exists but belongs to another user (who created it first, to block or
    spy on the cluster). The message is one line: the object, its owner's uid and ours."""

    def __init__(self, name: str, owner: int) -> None:
        super().__init__(
            f"{_path_of(name)} belongs to uid {owner}, not to this user (uid {os.geteuid()}):"
            f" another user created it; ringlog will not use it (its owner or root can"
            f" remove it)")
        self.name = name
        self.owner = owner


def _path_of(name: str, is_semaphore: bool | None = None) -> str:
    """Where the object ``name`` shows in SHM_DIRECTORY (the existing one if unknown)."""
    shm = os.path.join(SHM_DIRECTORY, name.lstrip("/"))
    sem = os.path.join(SHM_DIRECTORY, SEMAPHORE_FILE_PREFIX + name.lstrip("/"))
    if is_semaphore is None:
        return sem if os.path.lexists(sem) and not os.path.lexists(shm) else shm
    return sem if is_semaphore else shm


def foreign_owner(name: str, is_semaphore: bool) -> int | None:
    """The uid owning the object ``name`` if it exists and is not this user's, else None."""
    try:
        owner = os.lstat(_path_of(name, is_semaphore)).st_uid
    except FileNotFoundError:
        return None
    return None if owner == os.geteuid() else owner


def refuse_squatted(name: str, is_semaphore: bool) -> None:
    """Raise SquattedNameError if ``name`` exists and another user owns it (before using,
    or removing, a name this user expects to be its own)."""
    owner = foreign_owner(name, is_semaphore)
    if owner is not None:
        raise SquattedNameError(name, owner)


def object_name(cluster_id: str, *parts: str) -> str:
    """``/ringlog.<cluster_id>.<part>.<part>...`` after checking every component."""
    check_cluster_id(cluster_id)
    for part in parts:
        if not _PART.fullmatch(part):
            raise ValueError(f"name component must be dot-separated [A-Za-z0-9_-] words,"
                             f" found {part!r}")
    name = "/" + ".".join((PREFIX, cluster_id) + parts)
    if len(name) > _NAME_MAX:
        raise ValueError(f"object name of {len(name)} characters exceeds {_NAME_MAX}: {name}")
    return name


def broker_part(broker_id: int) -> str:
    """The name component of a broker: b<id>."""
    if not isinstance(broker_id, int) or broker_id < 0:
        raise ValueError(f"broker id must be an int >= 0, found {broker_id!r}")
    return f"b{broker_id}"


def listener_name(cluster_id: str, broker_id: int) -> str:
    """Well-known name of a broker's listener (shared memory)."""
    return object_name(cluster_id, broker_part(broker_id), "listener")


def doorbell_name(cluster_id: str, broker_id: int) -> str:
    """Well-known name of a broker's doorbell (semaphore)."""
    return object_name(cluster_id, broker_part(broker_id), "doorbell")


def connection_part(pid: int, token: str) -> str:
    """The name component of one client connection: c<pid>-<token>."""
    return f"c{pid}-{token}"


_CONNECTION_PART = re.compile(r"c[0-9]+-[0-9a-f]{1,32}")


def check_connection_part(part: str) -> str:
    """Return part if it has the shape connection_part() makes; else raise ValueError."""
    if not _CONNECTION_PART.fullmatch(part):
        raise ValueError(f"connection name must look like c<pid>-<hex token>, found {part!r}")
    return part


STATS_PART = "stats"
"""Name component of the stats pages: ``/ringlog.<cluster>.stats.<pid>``."""


def stats_page_name(cluster_id: str, pid: int) -> str:
    """Name of the stats page of process ``pid`` (shared memory)."""
    if not isinstance(pid, int) or pid <= 0:
        raise ValueError(f"pid must be an int > 0, found {pid!r}")
    return object_name(cluster_id, STATS_PART, str(pid))


def stats_page_pid(cluster_id: str, name: str) -> int | None:
    """The pid in ``name`` if it is a stats page name under the namespace cluster_id (for a
    bare cluster id, of any start of it), else None."""
    stem = f"/{PREFIX}.{check_cluster_id(cluster_id)}."
    if not name.startswith(stem):
        return None
    rest = name[len(stem):]
    if "." not in cluster_id and _TOKEN_PART.match(rest):
        rest = rest[TOKEN_HEX + 1:]
    kind, _, pid = rest.partition(".")
    return int(pid) if kind == STATS_PART and pid.isdigit() else None


_TOKEN_PART = re.compile(rf"[0-9a-f]{{{TOKEN_HEX}}}\.")


def list_objects(cluster_id: str) -> list[str]:
    """Names (``/ringlog.<namespace>...``) of every shared memory and semaphore under a
    namespace (for a bare cluster id: of every start of the cluster), this user's or not."""
    return sorted(name for name, _ in _scan(cluster_id, mine=False))


def _scan(cluster_id: str, mine: bool = True) -> list[tuple[str, bool]]:
    """(object name, is semaphore) for every object under the namespace in SHM_DIRECTORY;
    with ``mine``, only this user's (the only ones it may have made, and may remove)."""
    stem = f"{PREFIX}.{check_cluster_id(cluster_id)}."
    me = os.geteuid()
    found = []
    with os.scandir(SHM_DIRECTORY) as entries:
        for entry in entries:
            if entry.name.startswith(stem):
                found_one = ("/" + entry.name, False)
            elif entry.name.startswith(SEMAPHORE_FILE_PREFIX + stem):
                found_one = ("/" + entry.name[len(SEMAPHORE_FILE_PREFIX):], True)
            else:
                continue
            if mine:
                try:
                    if entry.stat(follow_symlinks=False).st_uid != me:
                        continue
                except FileNotFoundError:
                    continue  # removed meanwhile
            found.append(found_one)
    return found


def cleanup_stale(cluster_id: str) -> list[str]:
    """Unlink every shared memory and semaphore of cluster_id; return the names removed.

    Meant for a cluster start after a crash: it does not check whether a live process still
    uses an object (a mapped object keeps working after its name is removed, but nobody new can
    open it) — except a stats page, which stays while a process with its pid runs (the exact
    check, pid and start time, is ``cluster.stats.reader.reap_dead``). Objects of other users
    are left alone. A bare cluster id covers every start's namespace of the cluster.
    """
    removed = []
    for name, is_semaphore in _scan(cluster_id):
        pid = None if is_semaphore else stats_page_pid(cluster_id, name)
        if pid is not None and process_start_time(pid) is not None:
            continue
        if _unlink(name, is_semaphore):
            removed.append(name)
    return sorted(removed)


def _unlink(name: str, is_semaphore: bool) -> bool:
    """Unlink one object; False when it was already gone (its owner was first)."""
    try:
        if is_semaphore:
            posix_ipc.unlink_semaphore(name)
        else:
            posix_ipc.unlink_shared_memory(name)
    except (posix_ipc.ExistentialError, posix_ipc.PermissionsError):
        return False  # gone, or (replaced by) another user's: not ours to remove
    return True


def connection_parts(cluster_id: str, broker_id: int) -> list[str]:
    """The ``c<pid>-<token>`` parts of this user's connections to broker_id that have a
    request ring (``/ringlog.<c>.b<id>.c<pid>-<token>.req``), in order."""
    stem = object_name(cluster_id, broker_part(broker_id)) + "."
    parts = set()
    for name, is_semaphore in _scan(cluster_id):
        if not is_semaphore and name.startswith(stem) and name.endswith(".req"):
            part = name[len(stem):-len(".req")]
            if _CONNECTION_PART.fullmatch(part):
                parts.add(part)
    return sorted(parts)


def unlink_orphan_connections(cluster_id: str, broker_id: int,
                              held: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """Unlink the objects of connections to broker_id whose client process is gone and whose
    base name (``/ringlog.<c>.b<id>.c<pid>-<token>``) is not in ``held``; return the names.

    Such objects have no owner left: a client that died before its connection was accepted,
    or while the broker incarnation that accepted it was dying too, leaves them where neither
    the broker's reap() (it never held them) nor the client (dead) removes them. The pid in
    the name is the creator's; a live process with that pid keeps the objects (a reused pid
    only delays their removal until the cluster's cleanup_stale).
    """
    stem = object_name(cluster_id, broker_part(broker_id)) + "."
    removed = []
    for name, is_semaphore in _scan(cluster_id):
        if not name.startswith(stem):
            continue
        part = name[len(stem):].split(".", 1)[0]
        if not _CONNECTION_PART.fullmatch(part) or stem + part in held:
            continue
        if process_start_time(int(part[1:part.index("-")])) is None and _unlink(
                name, is_semaphore):
            removed.append(name)
    return sorted(removed)


class SharedRegion:
    """A named POSIX shared-memory object mapped into this process.

    Ownership: the creator unlinks; any process may open and close. buf is a memoryview of the
    whole mapping. With keep_fd the descriptor stays open (for flock); otherwise it is closed
    right after mapping. One thread uses a SharedRegion's lifecycle methods.
    """

    def __init__(self, name: str, memory: mmap.mmap, fd: int | None) -> None:
        self.name = name
        self.size = len(memory)
        self.fd = fd
        self._mmap: mmap.mmap | None = memory
        self.buf: memoryview = memoryview(memory)
        self._unlinked = False

    @classmethod
    def create(cls, name: str, size: int, keep_fd: bool = False) -> SharedRegion:
        """Create name with size zero bytes (FileExistsError if it exists) and map it."""
        try:
            shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=MODE, size=size)
        except posix_ipc.ExistentialError as exc:
            refuse_squatted(name, False)
            raise FileExistsError(f"shared memory {name} already exists") from exc
        except BaseException:  # created but not sized (e.g. ENOSPC): do not leave it behind
            try:
                posix_ipc.unlink_shared_memory(name)
            except posix_ipc.ExistentialError:
                pass
            raise
        try:
            return cls._map(name, shm, keep_fd)
        except BaseException:
            posix_ipc.unlink_shared_memory(name)
            raise

    @classmethod
    def open(cls, name: str, keep_fd: bool = False) -> SharedRegion:
        """Map an existing name (FileNotFoundError if there is none, or if its creator has not
        sized it yet; SquattedNameError if another user made it)."""
        refuse_squatted(name, False)
        try:
            shm = posix_ipc.SharedMemory(name)
        except posix_ipc.ExistentialError as exc:
            raise FileNotFoundError(f"shared memory {name} does not exist") from exc
        except posix_ipc.PermissionsError:
            refuse_squatted(name, False)  # made by another user since the check above
            raise
        if shm.size == 0:
            shm.close_fd()
            raise FileNotFoundError(f"shared memory {name} exists but is not sized yet")
        return cls._map(name, shm, keep_fd)

    @classmethod
    def _map(cls, name: str, shm: posix_ipc.SharedMemory, keep_fd: bool) -> SharedRegion:
        try:
            memory = mmap.mmap(shm.fd, shm.size)
        except BaseException:
            shm.close_fd()
            raise
        if keep_fd:
            return cls(name, memory, shm.fd)
        shm.close_fd()
        return cls(name, memory, None)

    def close_fd(self) -> None:
        """Close the kept descriptor early (the mapping stays); safe to call twice."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self) -> None:
        """Drop this process's mapping and descriptor; safe to call twice.

        If views of the mapping are still held elsewhere, the mapping stays until the last one
        is dropped (the garbage collector then unmaps it).
        """
        self.close_fd()
        if self._mmap is None:
            return
        memory, self._mmap = self._mmap, None
        try:
            self.buf.release()
            memory.close()
        except BufferError:
            pass  # someone still holds a view: unmapped when it goes

    def unlink(self) -> None:
        """Remove the name (mappings keep working); safe to call twice."""
        if not self._unlinked:
            self._unlinked = True
            try:
                posix_ipc.unlink_shared_memory(self.name)
            except posix_ipc.ExistentialError:
                pass  # already removed (by cleanup_stale or a peer taking over)

    def __repr__(self) -> str:
        return f"SharedRegion({self.name!r}, size={self.size})"


class NamedSemaphore:
    """A named POSIX semaphore (initial value 0) opened in this process.

    Ownership: the creator unlinks; any process may open, post and wait. The posix_ipc handle is
    `semaphore`; it may be used from several threads.
    """

    def __init__(self, name: str, semaphore: posix_ipc.Semaphore) -> None:
        self.name = name
        self.semaphore = semaphore
        self._closed = False
        self._unlinked = False

    @classmethod
    def create(cls, name: str) -> NamedSemaphore:
        """Create name with value 0 (FileExistsError if it exists; SquattedNameError if
        another user made it)."""
        try:
            return cls(name, posix_ipc.Semaphore(name, posix_ipc.O_CREX, mode=MODE,
                                                 initial_value=0))
        except posix_ipc.ExistentialError as exc:
            refuse_squatted(name, True)
            raise FileExistsError(f"semaphore {name} already exists") from exc

    @classmethod
    def open(cls, name: str) -> NamedSemaphore:
        """Open an existing name (FileNotFoundError if there is none; SquattedNameError if
        another user made it)."""
        refuse_squatted(name, True)
        try:
            return cls(name, posix_ipc.Semaphore(name))
        except posix_ipc.ExistentialError as exc:
            raise FileNotFoundError(f"semaphore {name} does not exist") from exc
        except posix_ipc.PermissionsError:
            refuse_squatted(name, True)
            raise

    def close(self) -> None:
        """Drop this process's handle; safe to call twice."""
        if not self._closed:
            self._closed = True
            self.semaphore.close()

    def unlink(self) -> None:
        """Remove the name (open handles keep working); safe to call twice."""
        if not self._unlinked:
            self._unlinked = True
            try:
                posix_ipc.unlink_semaphore(self.name)
            except posix_ipc.ExistentialError:
                pass  # already removed

    def __repr__(self) -> str:
        return f"NamedSemaphore({self.name!r})"
