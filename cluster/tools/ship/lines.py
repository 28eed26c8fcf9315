"""Cutting bytes read from a file into lines, each with the position of its first byte.

``cut(data, position, max_bytes, overflow, final, skipping)`` takes the bytes of a file from
``position`` and returns a ``Cut``: the complete lines (their ``\\n`` — and a ``\\r`` before
it — dropped), their positions, how many bytes were consumed (the next read starts there),
and counts. A last line without ``\\n`` is left unconsumed (read again with what follows),
unless ``final`` (the file is finished, or ``--once`` reached its end): then it is a line.

A line longer than ``max_bytes`` is, by ``overflow``:

- ``split``: cut into pieces of ``max_bytes``, each its own line (nothing lost), counted
  once in ``split``;
- ``truncate``: its first ``max_bytes`` bytes are the line, the rest is skipped up to the
  next ``\\n``, counted in ``truncated``. A skip can span reads: ``skipping`` says a read
  starts inside the rest of a truncated line (the returned ``skipping`` carries it on).

Pure: no I/O, no state; the whole split of ordinary chunks is C (``bytes.split``).
"""
from __future__ import annotations

from typing import NamedTuple

SPLIT = "split"
TRUNCATE = "truncate"
OVERFLOWS = (SPLIT, TRUNCATE)


class Cut(NamedTuple):
    lines: list
    positions: list
    consumed: int
    skipping: bool
    split: int
    truncated: int


def cut(data: bytes, position: int, max_bytes: int, overflow: str = SPLIT,
        final: bool = False, skipping: bool = False) -> Cut:
    start = 0
    if skipping:
        newline = data.find(b"\n")
        if newline < 0:
            return Cut([], [], len(data), not final, 0, 0)
        start = newline + 1
    parts = data[start:].split(b"\n") if start else data.split(b"\n")
    rest = parts.pop()  # after the last newline: a partial line, or b""
    lines, positions = [], []
    split = truncated = 0
    at = position + start
    if not parts or max(map(len, parts)) <= max_bytes:
        for part in parts:
            positions.append(at)
            at += len(part) + 1
        lines = [p[:-1] if p.endswith(b"\r") else p for p in parts] if b"\r" in data else parts
    else:
        for raw in parts:
            line = raw[:-1] if raw.endswith(b"\r") else raw
            s, t = _overflow(line, at, max_bytes, overflow, lines, positions)
            split += s
            truncated += t
            at += len(raw) + 1
    consumed = at - position
    if len(rest) > max_bytes:
        if overflow == SPLIT:
            whole = len(rest) - len(rest) % max_bytes
            for piece in range(0, whole, max_bytes):
                lines.append(rest[piece:piece + max_bytes])
                positions.append(at + piece)
            split += 1
            consumed += whole
            rest = rest[whole:]
            at += whole
        else:
            lines.append(rest[:max_bytes])
            positions.append(at)
            truncated += 1
            return Cut(lines, positions, len(data), not final, split, truncated)
    if final and rest:
        lines.append(rest[:-1] if rest.endswith(b"\r") else rest)
        positions.append(at)
        consumed += len(rest)
    return Cut(lines, positions, consumed, False, split, truncated)


def _overflow(line, at, max_bytes, overflow, lines, positions):
    if len(line) <= max_bytes:
        lines.append(line)
        positions.append(at)
        return 0, 0
    if overflow == TRUNCATE:
        lines.append(line[:max_bytes])
        positions.append(at)
        return 0, 1
    for piece in range(0, len(line), max_bytes):
        lines.append(line[piece:piece + max_bytes])
        positions.append(at + piece)
    return 1, 0
