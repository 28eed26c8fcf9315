"""The per-record parts of a chaos history as columns (numpy arrays), so that a run of
millions of records is checked in bounded memory: ``Outcomes`` (the producers' send
outcomes) and ``Reads`` (what consumers read).

A record's JSON line costs hundreds of bytes as a Python dict; here an outcome is 25 bytes
and a read 26 (offsets int32 while they fit; the drain's reader column is a broadcast
scalar). The history files are read in blocks by pyarrow's JSON-lines reader
(``outcomes_of_files``, ``reads_of_file``) and never held whole: the producers' ``invoke``
lines are counted (their times kept only for the sends that did not succeed), and a
consumer's reads that the final drain read too (same offset, same value) are counted and
dropped (``Reads.residue``: what they add to the checks is what differs). A value the
workload did not write (``workload.parse_value`` gives None: the divergence scenario's
``x...`` records, a damaged padded record, garbage) keeps its text in ``Reads.other``.

``Outcomes.of_dicts`` / ``Reads.of_dicts`` make the same columns of hand-made lists of
dicts (the checker's tests). Pure data: any thread.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from cluster.tools.chaos.workload import parse_value, value_of

#: Seconds a send may wait for its acknowledgement before the wait counts as unavailability
#: (``checker.unavailability``'s "acks stalled"; such rows keep their invocation time).
STALLED = 1.0
#: Outcome kinds (the ``op`` of a producer's history line).
OK, FAIL, INFO = 1, 2, 3
KINDS = {"ok": OK, "fail": FAIL, "info": INFO}
#: Bytes of a history file parsed at a time.
BLOCK = 1024 * 1024
#: ``Reads.reader`` of the final drain (consumers are numbered from 0).
DRAIN = -1
_PRODUCER_SCHEMA = pa.schema([("op", pa.string()), ("p", pa.int64()), ("seq", pa.int64()),
                              ("t", pa.float64()), ("partition", pa.int64()),
                              ("offset", pa.int64())])
_READ_SCHEMA = pa.schema([("op", pa.string()), ("partition", pa.int64()),
                          ("offset", pa.int64()), ("value", pa.string()),
                          ("t", pa.float64())])
#: The allocator of the parsed blocks: the system's, which gives freed blocks back (the
#: default pool keeps them: hundreds of MB of a run's RSS).
_POOL = pa.system_memory_pool()
#: glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Offsets below 2**40 and partitions below 2**23 make one int64 place key.
_OFFSET_BITS = 40


@dataclasses.dataclass
class Outcomes:
    """One row per send outcome: kind (OK, FAIL, INFO), producer ``p``, ``seq``, time
    ``t``, ``partition`` (-1: none) and ``offset`` (-1: none); ``sent``: the invocations;
    ``invoked``: {row: invocation time} of the rows that are not OK or were acknowledged
    more than ``STALLED`` seconds after their invocation (the others' are not kept)."""

    kind: np.ndarray
    p: np.ndarray
    seq: np.ndarray
    t: np.ndarray
    partition: np.ndarray
    offset: np.ndarray
    sent: int = 0
    invoked: dict = dataclasses.field(default_factory=dict)

    def __len__(self):
        return len(self.kind)

    @classmethod
    def empty(cls):
        return cls(*_empty((np.int8, np.int32, np.int32, np.float64, np.int32, np.int64)))

    @classmethod
    def of_dicts(cls, ops):
        """The columns of producer history lines given as dicts."""
        invokes = {(o["p"], o["seq"]): o["t"] for o in ops if o["op"] == "invoke"}
        rows = [o for o in ops if o["op"] in KINDS]
        found = cls(np.array([KINDS[o["op"]] for o in rows], np.int8),
                    np.array([o["p"] for o in rows], np.int32),
                    np.array([o["seq"] for o in rows], np.int32),
                    np.array([o["t"] for o in rows], np.float64),
                    np.array([_or(o.get("partition"), -1) for o in rows], np.int32),
                    np.array([_or(o.get("offset"), -1) for o in rows], np.int64),
                    sent=sum(1 for o in ops if o["op"] == "invoke"))
        found.invoked = {n: invokes.get((o["p"], o["seq"]), o["t"])
                         for n, o in enumerate(rows) if o["op"] != "ok"
                         or o["t"] - invokes.get((o["p"], o["seq"]), o["t"]) > STALLED}
        return found


@dataclasses.dataclass
class Reads:
    """One row per read: ``reader`` (a consumer's number, DRAIN), ``partition``,
    ``offset``, the value's producer ``p`` and ``seq`` (-1: not a workload value, its text
    in ``other`` {row: text}) and ``t``; ``count``: the reads they stand for (a
    consumer's reads the drain also made are counted, not kept)."""

    reader: np.ndarray
    partition: np.ndarray
    offset: np.ndarray
    p: np.ndarray
    seq: np.ndarray
    t: np.ndarray
    other: dict = dataclasses.field(default_factory=dict)
    count: int = 0

    def __len__(self):
        return len(self.reader)

    @classmethod
    def empty(cls):
        return cls(*_empty((np.int16, np.int32, np.int64, np.int32, np.int32, np.float64)))

    @classmethod
    def of_dicts(cls, reads):
        """The columns of read history lines given as dicts."""
        keys = [parse_value(r["value"]) for r in reads]
        found = cls(np.array([DRAIN if r["c"] == "drain" else r["c"] for r in reads],
                             np.int16),
                    np.array([r["partition"] for r in reads], np.int32),
                    np.array([r["offset"] for r in reads], np.int64),
                    np.array([-1 if k is None else k[0] for k in keys], np.int32),
                    np.array([-1 if k is None else k[1] for k in keys], np.int32),
                    np.array([r["t"] for r in reads], np.float64),
                    count=len(reads))
        found.other = {n: r["value"] for n, (r, k) in enumerate(zip(reads, keys, strict=True))
                       if k is None}
        return found

    def value(self, row):
        """The text of row ``row``'s value (a padded value without its size)."""
        text = self.other.get(int(row))
        return text if text is not None else value_of(int(self.p[row]), int(self.seq[row]))

    def values(self):
        """The text of every row's value."""
        return [self.value(n) for n in range(len(self))]

    def rows(self):
        """The reads as dicts (the history's lines; for small histories)."""
        return [{"op": "read", "c": "drain" if self.reader[n] == DRAIN else int(self.reader[n]),
                 "partition": int(self.partition[n]), "offset": int(self.offset[n]),
                 "value": self.value(n), "t": float(self.t[n])} for n in range(len(self))]

    def places(self):
        """One int64 per row naming its (partition, offset)."""
        return place_keys(self.partition, self.offset)

    def keys(self):
        """One int64 per row naming its value's (producer, seq); -1 - row for others
        (each its own, compared by text where it matters)."""
        keys = record_keys(self.p, self.seq)
        mine = self.p < 0
        keys[mine] = -1 - np.flatnonzero(mine)
        return keys

    def residue(self, drain, seen=None):
        """The rows the final ``drain`` (Reads, sorted by place) does not hold as they
        are: another value at the place, or a place it did not read. ``seen``: a bool
        array over the drain's rows, set where these rows read the same."""
        at = drain.find(self.partition, self.offset)
        rows = np.flatnonzero((at >= 0) & (self.p >= 0))
        at = at[rows]
        match = (drain.p[at] == self.p[rows]) & (drain.seq[at] == self.seq[rows])
        if seen is not None:
            seen[at[match]] = True
        same = np.zeros(len(self), bool)
        same[rows[match]] = True
        return self.take(np.flatnonzero(~same))

    def find(self, partition, offset):
        """The first row of these reads (sorted by place) at each (partition, offset); -1
        where none (a partition's rows at a time: no key column of these reads)."""
        at = np.full(len(offset), -1, np.int64)
        for part in np.unique(partition):
            low, high = np.searchsorted(self.partition, part, side="left"), \
                np.searchsorted(self.partition, part, side="right")
            rows = np.flatnonzero(partition == part)
            offsets = self.offset[low:high]
            where = np.searchsorted(offsets, offset[rows])
            held = where < len(offsets)
            held[held] = offsets[where[held]] == offset[rows][held]
            at[rows[held]] = low + where[held]
        return at

    def take(self, rows):
        index = {int(r): n for n, r in enumerate(rows)}
        return Reads(self.reader[rows], self.partition[rows], self.offset[rows],
                     self.p[rows], self.seq[rows], self.t[rows],
                     {index[r]: v for r, v in self.other.items() if r in index},
                     count=len(rows))

    @classmethod
    def concat(cls, parts, count=None):
        count = sum(p.count for p in parts) if count is None else count
        parts = [p for p in parts if len(p)] or [cls.empty()]
        if len(parts) == 1:  # no copy (the drain alone: millions of rows)
            return dataclasses.replace(parts[0], count=count)
        other, base = {}, 0
        for part in parts:
            other.update({base + r: v for r, v in part.other.items()})
            base += len(part)
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in _READ_FIELDS),
                   other, count)

    def sorted_by_place(self):
        """These reads sorted by place, in place (a column at a time)."""
        order = np.argsort(self.places(), kind="stable")
        for field in _READ_FIELDS:
            setattr(self, field, getattr(self, field)[order])
        if self.other:
            index = np.empty(len(order), np.int64)
            index[order] = np.arange(len(order))
            self.other = {int(index[row]): text for row, text in self.other.items()}
        return self


def _join(parts, fields):
    """Each field's arrays of ``parts`` joined, one field at a time, each part's array
    dropped once joined (so joining costs one column more, not the whole table)."""
    joined = []
    for field in fields:
        joined.append(np.concatenate([getattr(part, field) for part in parts]))
        for part in parts:
            setattr(part, field, None)
    return joined


_OUTCOME_FIELDS = ("kind", "p", "seq", "t", "partition", "offset")
_READ_FIELDS = ("reader", "partition", "offset", "p", "seq", "t")


def place_keys(partition, offset):
    """One int64 per (partition, offset), made in place (one int64 column, no more)."""
    if len(offset) and (offset.max() >= 1 << _OFFSET_BITS or partition.max() >= 1 << 22):
        raise ValueError("an offset of 2**40 or a partition of 2**22 or more: too large for "
                         "the checker's place keys")
    keys = partition.astype(np.int64)
    keys <<= _OFFSET_BITS
    keys |= offset
    return keys


def record_keys(p, seq):
    """One int64 per (producer, seq), made in place (one int64 column, no more)."""
    keys = p.astype(np.int64)
    keys <<= 32
    keys |= seq
    return keys


def _or(value, default):
    return default if value is None else value


def _empty(dtypes):
    return [np.zeros(0, dtype) for dtype in dtypes]


# -- reading the files ----------------------------------------------------------------------


def return_freed_memory():
    """Have glibc's malloc give large freed blocks back to the system at once
    (``mallopt``: blocks of 64 KiB and more mapped apart, the heap trimmed on free), so
    the checker's passing columns do not stay in its RSS: a 1M-record history checked in
    317 MB instead of 419 (perf/chaos_checker_rss.py). Nothing on another libc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 64 * 1024)
        libc.mallopt(_M_TRIM_THRESHOLD, 0)
    except (OSError, AttributeError):  # not glibc
        pass


def outcomes_of_files(paths):
    """The Outcomes of producer history files (module doc)."""
    parts = []
    for path in paths:
        parts.append(_outcomes_of_file(path))
    if not parts:
        return Outcomes.empty()
    invoked, base = {}, 0
    for part in parts:
        invoked.update({base + r: t for r, t in part.invoked.items()})
        base += len(part)
    sent = sum(p.sent for p in parts)
    return Outcomes(*_join(parts, _OUTCOME_FIELDS), sent=sent, invoked=invoked)


def _outcomes_of_file(path):
    chunks, sent = [], 0
    invoke_t = np.zeros(0, np.float64)  # by seq: one producer's invocation times
    for batch in _batches(path, _PRODUCER_SCHEMA):
        op = batch.column("op")
        invokes = pc.equal(op, "invoke")
        seqs = _ints(batch.column("seq").filter(invokes))
        if len(seqs):
            sent += len(seqs)
            if seqs.max() >= len(invoke_t):
                invoke_t = np.concatenate([invoke_t, np.full(
                    max(int(seqs.max()) + 1 - len(invoke_t), len(invoke_t)), np.nan)])
            invoke_t[seqs] = batch.column("t").filter(invokes).to_numpy(zero_copy_only=False)
        outcome = pc.is_in(op, pa.array(list(KINDS)))
        rows = batch.filter(outcome)
        kind = np.full(len(rows), OK, np.int8)
        for name, code in KINDS.items():
            kind[np.asarray(pc.equal(rows.column("op"), name))] = code
        chunks.append(Outcomes(kind, _ints(rows.column("p"), np.int32),
                               _ints(rows.column("seq"), np.int32),
                               rows.column("t").to_numpy(zero_copy_only=False),
                               _ints(rows.column("partition").fill_null(-1), np.int32),
                               _narrow(_ints(rows.column("offset").fill_null(-1)))))
    if not chunks:
        return Outcomes.empty()
    found = Outcomes(*_join(chunks, _OUTCOME_FIELDS), sent=sent)
    invoked = np.full(len(found), np.nan)
    known = found.seq < len(invoke_t)
    invoked[known] = invoke_t[found.seq[known]]
    with np.errstate(invalid="ignore"):  # NaN: an outcome without its invocation
        kept = (found.kind != OK) | (found.t - invoked > STALLED)
    for row in np.flatnonzero(kept):
        t = invoked[row]
        found.invoked[int(row)] = float(found.t[row] if np.isnan(t) else t)
    return found


def reads_of_file(path, reader, drain=None, seen=None):
    """The Reads of a consumer's history file (its ``read`` lines), numbered ``reader``;
    with ``drain`` (the final drain's Reads, sorted by place) only their ``residue``
    (``seen``: as there)."""
    parts, count = [], 0
    for batch in _batches(path, _READ_SCHEMA):
        rows = batch.filter(pc.equal(batch.column("op"), "read"))
        part = _reads_of_batch(rows, reader)
        count += len(part)
        parts.append(part if drain is None else part.residue(drain, seen))
    parts = [part for part in parts if len(part)]
    if len(parts) <= 1:
        return Reads.concat(parts, count=count)
    other, base = {}, 0
    for part in parts:
        other.update({base + r: v for r, v in part.other.items()})
        base += len(part)
    return Reads(*_join(parts, _READ_FIELDS), other, count)


def _reads_of_batch(rows, reader):
    values = rows.column("value")
    parsed = pc.extract_regex(values, r"^p(?P<p>\d{1,9}):(?P<seq>\d{1,9})(?P<size>#\d+)?$")
    ok = np.asarray(parsed.is_valid())
    p = np.full(len(rows), -1, np.int32)
    seq = np.full(len(rows), -1, np.int32)
    if ok.any():
        fields = parsed.filter(pa.array(ok))
        p[ok] = _ints(pc.cast(pc.struct_field(fields, "p"), pa.int64()), np.int32)
        seq[ok] = _ints(pc.cast(pc.struct_field(fields, "seq"), pa.int64()), np.int32)
    others = np.flatnonzero(~ok)
    texts = values.take(pa.array(others)).to_pylist() if len(others) else []
    return Reads(np.full(len(rows), reader, np.int16),
                 _ints(rows.column("partition"), np.int32), _narrow(_ints(rows.column("offset"))),
                 p, seq, rows.column("t").to_numpy(zero_copy_only=False),
                 {int(r): text for r, text in zip(others, texts, strict=True)}, len(rows))


def _ints(column, dtype=np.int64):
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=dtype)


def _narrow(offsets):
    """int64 offsets as int32 when they fit (half the memory; the blocks of a file whose
    offsets pass 2**31 stay int64, and joining them makes the column int64)."""
    if len(offsets) and (offsets.max() >= 1 << 31 or offsets.min() < -1):
        return offsets
    return offsets.astype(np.int32)


def _batches(path, schema):
    """The record batches of a JSON-lines history file, its last line left out when a
    kill cut it short (``history.read_lines``' rule; any other bad line raises its
    ValueError naming file and line)."""
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return
    whole = _whole_lines_size(path, size)
    if whole == 0:
        return
    with open(path, "rb") as file:
        try:
            reader = pajson.open_json(
                _Upto(file, whole), read_options=pajson.ReadOptions(block_size=BLOCK),
                parse_options=pajson.ParseOptions(explicit_schema=schema,
                                                  unexpected_field_behavior="ignore"),
                memory_pool=_POOL)
            yield from reader
        except pa.ArrowInvalid:
            from cluster.tools.chaos.history import read_lines
            read_lines(path)  # raises the ValueError naming the line
            raise


def _whole_lines_size(path, size):
    """Bytes of ``path`` up to its last newline, or all of it when its last line is a
    whole JSON object without one."""
    with open(path, "rb") as file:
        file.seek(max(0, size - 65536))
        tail = file.read()
    cut = tail.rfind(b"\n")
    if cut == len(tail) - 1:
        return size
    return size - len(tail) + cut + 1 if cut >= 0 else 0


class _Upto:
    """A binary file read only up to ``limit`` bytes."""

    def __init__(self, file, limit):
        self.file, self.left = file, limit
        self.closed = False

    def read(self, size=-1):
        size = self.left if size is None or size < 0 else min(size, self.left)
        data = self.file.read(size)
        self.left -= len(data)
        return data

    def readable(self):
        return True

    def seekable(self):
        return False

    def close(self):
        self.closed = True
