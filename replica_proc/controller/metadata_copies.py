"""The metadata log's copies in every broker's directory, and the repair of a damaged one.

Files (``D`` the data directory)::

    D/__cluster_metadata-0/                   the controller's log (``metadata_log``)
    D/broker-<id>/__cluster_metadata-0.copy/  broker <id>'s copy: the log's ``.log``
                                              segment files, byte for byte, nothing else
    <a copy, or the log>.<uuid hex>-damaged   a damaged one, kept aside (never deleted)

KRaft keeps ``__cluster_metadata-0`` on a quorum of controllers, and every broker
replicates it as an observer. Here every broker directory holds a copy, and the active
controller writes them all itself (one host, one file system: no fetch is needed to reach
a stopped broker's directory), so a broker that is down misses nothing.

**Writing** (``MetadataCopies.sync``, after each append of the active controller and
before its publish): every copy's segment files are brought to the log's — the bytes past
what the copy holds are written at the same positions and fdatasync-ed, a new file's
directory fsynced. A change is therefore published only once every copy holds it. The
copies are the broker directories D lists at each sync (a broker directory made later
gets the whole log). A copy that cannot be written (a full disk) is logged once (ERROR),
rewritten from the start at the next sync that can, and is otherwise *behind*: the next
open repairs it.

**Choosing** (``MetadataCopies.reconcile``, when a controller opens the log, under the
takeover lock, before the log's own recovery): every copy, the log included, is read and
checked strictly (``scan``): whole batches, each CRC, offsets that run on without a gap
from the first segment's base (each segment starting where the one before ended),
controller epochs that never go down. Its *valid prefix* is the batches before the first
failure; anything after it is its *damage*.

1. The *authority* is chosen among the intact copies (no damage), and the log when it has
   no clean-shutdown marker (its damage is then a torn append that its recovery cuts, as
   without copies): the highest end offset wins — a copy that is *behind* (a failed
   write, a broker directory made after the log, a log from before copies existed) is
   never chosen over a longer one. Copies that end at the same offset with different
   bytes (a flip the checks cannot see: the partitionLeaderEpoch of a last batch, outside
   the CRC) are settled by which bytes most copies hold; a tie refuses the start.
2. The start is refused (KafkaStorageError naming each copy and its damage) when there is
   no authority, or when a damaged copy may hold changes no candidate holds: its valid
   prefix ends past the authority's, or its files hold more bytes. Cutting it would make
   the controller forget them (and the brokers delete those topics' logs).
3. Every other copy is made the authority's: one whose bytes are a prefix of the
   authority's (behind) gets the rest written (a WARNING); any other (damaged, or
   different) is renamed aside to ``<name>.<uuid hex>-damaged`` and written anew from the
   authority (an ERROR naming it, its damage, where it was kept and the copy it was
   repaired from). The log, when it is not the authority and differs from it, is set
   aside the same way and rebuilt from the authority's ``.log`` files: opening it then
   rebuilds its indexes and checkpoints (no clean-shutdown marker).

Cost: a commit writes and fdatasyncs each copy (one per broker) after the log; opening
the log reads every copy once.

Ownership: a MetadataCopies belongs to its ``MetadataLog`` (the active controller's
thread); ``scan`` is a pure function over a directory.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import logging
import os
import re
import uuid

from cluster.metadata import data_dir as dd
from segments.checkpoint import fsync_directory
from segments.errors import CorruptRecordError, KafkaStorageError
from segments.log import CLEAN_SHUTDOWN_MARKER
from segments.record.batch_header import iter_batches
from segments.record.records import RecordBatch
from segments.segment import LOG_SUFFIX, base_offset_from_name

log = logging.getLogger(__name__)

#: A copy's directory under ``D/broker-<id>/`` (not a partition directory name:
#: ``replica_proc.partition.parse_directory_name`` refuses it).
COPY_DIR = dd.METADATA_LOG_DIR + ".copy"
#: Suffix of a damaged copy (or log) renamed aside, after ``.<uuid hex>``.
DAMAGED_SUFFIX = "-damaged"

_SEGMENT_NAME = re.compile(r"[0-9]{20}" + re.escape(LOG_SUFFIX))


@dataclasses.dataclass
class Scan:
    """What ``scan`` found in one copy's directory."""

    path: str
    #: segment file name -> its bytes, in name order
    files: dict
    #: the valid prefix: segment file name -> its bytes in it, up to the damaged file
    prefix: dict
    #: the offset after the valid prefix (the first segment's base if it has no batch)
    end: int
    #: the first failure, naming the file and the position; None if intact
    damage: str | None
    #: whether the directory holds a clean-shutdown marker (the log's only)
    clean: bool

    @property
    def size(self):
        return sum(len(data) for data in self.files.values())

    def digest(self):
        """A digest of the valid prefix: equal for copies holding the same batches."""
        digest = hashlib.blake2b(digest_size=16)
        for name, data in self.prefix.items():
            digest.update(f"{name}:{len(data)}:".encode())
            digest.update(data)
        return digest.digest()

    def is_prefix_of(self, other):
        """Whether this copy's files are the start of ``other``'s valid prefix (it is
        behind)."""
        names = list(self.files)
        if names != list(other.prefix)[:len(names)]:
            return False
        for n, name in enumerate(names):
            mine, theirs = self.files[name], other.prefix[name]
            if n < len(names) - 1 and len(mine) != len(theirs):
                return False
            if theirs[:len(mine)] != mine:
                return False
        return True


def scan(path):
    """Read and check the segment files in ``path`` (module doc: *Choosing*): a Scan. A
    missing directory is an empty, intact copy."""
    try:
        names = sorted(n for n in os.listdir(path) if _SEGMENT_NAME.fullmatch(n))
    except FileNotFoundError:
        names = []
    files = {}
    for name in names:
        with open(os.path.join(path, name), "rb") as f:
            files[name] = f.read()
    valid = dict.fromkeys(names, 0)
    end = base_offset_from_name(names[0]) if names else 0
    expected, epoch, damage = None, -1, None
    for name in names:
        data = files[name]
        position = 0
        try:
            for header in iter_batches(data):
                header.validate()
                wanted = base_offset_from_name(name) if expected is None else expected
                if header.base_offset != wanted:
                    raise CorruptRecordError(
                        f"batch at position {position}: base offset {header.base_offset}, "
                        f"expected {wanted}")
                if header.partition_leader_epoch < epoch:
                    raise CorruptRecordError(
                        f"batch at position {position}: controller epoch "
                        f"{header.partition_leader_epoch} after {epoch}")
                epoch = header.partition_leader_epoch
                expected = header.next_offset
                position += header.size_in_bytes
                valid[name] = position
                end = expected
            if position != len(data):
                raise CorruptRecordError(f"{len(data) - position} bytes at position "
                                         f"{position} are no whole batch")
        except CorruptRecordError as exc:
            damage = f"{os.path.join(path, name)}: {exc.args[0] if exc.args else exc}"
            names = names[:names.index(name) + 1]
            break
    prefix = {name: memoryview(files[name])[:valid[name]] for name in names}
    return Scan(os.fspath(path), files, prefix, end, damage,
                os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_MARKER)))


def epochs_match_records(copy):
    """Whether each batch of ``copy``'s valid prefix whose controller epoch (its
    partitionLeaderEpoch, outside the CRC) differs from the batch before it, and is
    positive, starts with the ``controller`` record of that epoch: a controller's first
    batch does (``controller._become_active``), and it is the only one that changes the
    epoch. Settles two copies that differ in an epoch the batch checks cannot see."""
    epoch = None
    for data in copy.prefix.values():
        for header in iter_batches(data):
            if header.partition_leader_epoch != epoch and header.partition_leader_epoch > 0:
                first = next(iter(RecordBatch(data, header.position)), None)
                try:
                    record = json.loads(first.value) if first is not None else {}
                except ValueError:
                    return False
                if not isinstance(record, dict) or record.get("type") != "controller" or (
                        record.get("epoch") != header.partition_leader_epoch):
                    return False
            epoch = header.partition_leader_epoch
    return True


def first_difference(copy, other):
    """The file of ``copy`` where it first differs from ``other`` (its directory if none)."""
    for name, data in copy.prefix.items():
        if other.prefix.get(name) != data:
            return os.path.join(copy.path, name)
    return copy.path


def copy_paths(data_dir):
    """The copy directory of every broker directory in ``data_dir``."""
    return [os.path.join(dd.broker_dir(data_dir, broker_id), COPY_DIR)
            for broker_id in dd.broker_ids(data_dir)]


class MetadataCopies:
    """The copies of the metadata log in ``log_path`` (``D/__cluster_metadata-0``)."""

    def __init__(self, data_dir, log_path):
        self.data_dir = os.fspath(data_dir)
        self.log_path = os.fspath(log_path)
        #: copy directory -> {segment file name: bytes it holds}; None: unknown (rewrite)
        self._held = {}
        self._failed = set()  # copies whose last write failed (logged once)

    # -- choosing and repairing -----------------------------------------------------------

    def reconcile(self):
        """Check every copy and the log, repair the ones that differ from the authority
        (module doc); raise KafkaStorageError if no copy can be trusted."""
        scans = [scan(self.log_path)] + [scan(path) for path in copy_paths(self.data_dir)]
        log_scan = scans[0]
        torn_log = log_scan.damage is not None and not log_scan.clean
        candidates = [s for s in scans if s.damage is None or (s is log_scan and torn_log)]
        authority = self._authority(scans, candidates)
        for other in scans:
            if other.damage is not None and other not in candidates and (
                    other.end > authority.end or other.size > authority.size):
                what = "metadata log" if other is log_scan else "metadata log copy"
                raise KafkaStorageError(
                    f"{what} {other.damage}; it holds more than the longest "
                    f"whole copy {authority.path} (end offset {authority.end}): not "
                    f"repairing it (that would forget the changes after the damage), not "
                    f"starting")
        held = {name: len(data) for name, data in authority.prefix.items()}
        self._held = {path: dict(held) for path in copy_paths(self.data_dir)}
        for other in scans:
            if other is authority:
                continue
            if other is log_scan:  # the log must be whole to open: a failure raises
                self._repair(other, authority, log_scan)
                continue
            try:
                self._repair(other, authority, log_scan)
            except OSError as exc:  # a copy is not worth refusing the start for
                self._held[other.path] = None
                log.error("metadata log copy %s: repair failed (%s); it is rewritten at "
                          "the next write", other.path, exc)

    def _authority(self, scans, candidates):
        if not candidates:
            raise KafkaStorageError(self._refusal(scans))
        end = max(s.end for s in candidates)
        longest = [s for s in candidates if s.end == end]
        groups = collections.defaultdict(list)
        for s in longest:
            groups[s.digest()].append(s)
        ranked = sorted(groups.values(), key=len, reverse=True)
        tied = [group for group in ranked if len(group) == len(ranked[0])]
        if len(tied) > 1:  # as many copies hold each: the epochs must match the records
            tied = [group for group in tied if epochs_match_records(group[0])]
        if len(tied) != 1:
            files = ", ".join(first_difference(group[0], ranked[0][0]) for group in ranked)
            raise KafkaStorageError(
                f"metadata log copies {files} all end at offset {end} but hold different "
                f"bytes, as many copies each: cannot tell which is damaged; not starting")
        return tied[0][0]

    def _refusal(self, scans):
        damaged = "; ".join(f"metadata log {s.damage}" if s.path == self.log_path
                            else f"copy {s.damage}" for s in scans if s.damage)
        return (f"{damaged}; no whole copy of the metadata log is left (cutting it would "
                f"forget the changes after the damage): not starting")

    def _repair(self, other, authority, log_scan):
        is_log = other is log_scan
        same = other.digest() == authority.digest()
        if same and (other.damage is None or is_log and not other.clean):
            return  # the same batches (a torn append after them: the log's recovery cuts it)
        behind = other.damage is None and other.is_prefix_of(authority)
        what = "metadata log" if is_log else "metadata log copy"
        if behind and not is_log:
            log.warning("%s %s is behind (end offset %d, the authority %s %d): brought up "
                        "to date", what, other.path, other.end, authority.path,
                        authority.end)
            self._write(other.path, authority, {n: len(d) for n, d in other.files.items()})
            return
        kept = None
        if os.path.exists(other.path):
            kept = f"{other.path}.{uuid.uuid4().hex}{DAMAGED_SUFFIX}"
            os.rename(other.path, kept)
        if other.damage is not None:
            state = f"is damaged ({other.damage})"
        elif behind:
            state = f"is behind (end offset {other.end})"
        else:
            state = f"holds other bytes than the copies ending at offset {authority.end}"
        if kept is None:
            log.error("%s %s is missing: rebuilt from %s (end offset %d)", what,
                      other.path, authority.path, authority.end)
        else:
            log.error("%s %s %s: kept aside as %s, repaired from %s (end offset %d)", what,
                      other.path, state, kept, authority.path, authority.end)
        self._write(other.path, authority, {})

    def _write(self, path, authority, held):
        """Make the segment files in ``path`` the authority's valid prefix, writing past
        the ``held`` bytes of each (fdatasync-ed, the directory fsynced)."""
        created = not os.path.isdir(path)
        with dd.private_umask():
            os.makedirs(path, exist_ok=True)
        for name, data in authority.prefix.items():
            _write_file(os.path.join(path, name), data, held.get(name, 0), truncate=True)
        fsync_directory(path)
        if created:
            fsync_directory(os.path.dirname(path))

    # -- writing --------------------------------------------------------------------------

    def sync(self, segments):
        """Bring every copy to the log's ``segments`` (``[(file path, size)]``, in order):
        write what each lacks and fdatasync it (module doc: *Writing*)."""
        for path in copy_paths(self.data_dir):
            held = self._held.get(path)
            try:
                if held is None:  # new, or unknown after a failed write: rewrite it all
                    held = {}
                    for name in list(os.listdir(path)) if os.path.isdir(path) else []:
                        if _SEGMENT_NAME.fullmatch(name):
                            os.truncate(os.path.join(path, name), 0)
                self._sync_copy(path, held, segments)
            except OSError as exc:
                self._held[path] = None
                if path not in self._failed:
                    self._failed.add(path)
                    log.error("metadata log copy %s: write failed (%s); it is behind until "
                              "a later write succeeds or the next controller repairs it",
                              path, exc)
                continue
            self._held[path] = held
            self._failed.discard(path)

    def _sync_copy(self, path, held, segments):
        created = not os.path.isdir(path)
        if created:
            with dd.private_umask():
                os.makedirs(path, exist_ok=True)
        new_file = created
        for file, size in segments:
            name = os.path.basename(file)
            start = held.get(name)
            if start == size:
                continue
            new_file |= start is None
            with open(file, "rb") as source:
                source.seek(start or 0)
                data = source.read(size - (start or 0))
            _write_file(os.path.join(path, name), data, 0, offset=start or 0)
            held[name] = size
        if new_file:
            fsync_directory(path)
        if created:
            fsync_directory(os.path.dirname(path))


def _write_file(path, data, start, offset=0, truncate=False):
    """Write ``data[start:]`` at file position ``offset + start`` of ``path`` (created
    0600 if missing), cut the file there if ``truncate``, and fdatasync it."""
    with dd.private_umask():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, dd.FILE_MODE)
    try:
        view = memoryview(data)
        position = start
        while position < len(view):
            position += os.pwrite(fd, view[position:], offset + position)
        if truncate:
            os.ftruncate(fd, offset + len(view))
        os.fdatasync(fd)
    finally:
        os.close(fd)
