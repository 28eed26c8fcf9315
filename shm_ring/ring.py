"""Single-producer/single-consumer frame ring over a block of (shared) memory.

The layout and the store-order protocol are in ring_descriptor. This module moves frames of
bytes; it knows nothing of processes, names or waiting (see wakeup and shared_ring).

A message longer than the ring's largest frame goes as fragments (ring_descriptor, "Messages
longer than a frame"): try_write (or try_write_filled, for a message made of pieces that are
copied straight into the frames) writes as many as there is room for and returns False until
the last is out — the caller retries with the same object, as for a full ring, and every
other write first finishes it; read assembles it into a buffer of its own and returns it
whole. Both happen on the paths ordinary frames take only when the ring is full or wraps,
so frames that fit cost what they did. A ring that is part way through a message says so
(``sending`` for the writer, ``assembling`` for the reader): the layers that wake the peer
(wakeup, connection) then wake it although no whole frame moved.

The per-frame state and the hot paths (a data frame that fits, a claim and its commit, a
read and a release) are Ring's base, ring_core.RingCore, or its compiled twin; the general
paths here serve both (ring_core's module doc).
"""
from __future__ import annotations

from shm_ring import ring_descriptor as rd
from shm_ring.ring_core import RING_CORE, RingCore

_HEADER = rd.FRAME_HEADER_LENGTH
_LOW_HALF = 0xFFFF_FFFF
_PADDING = rd.PADDING_TYPE
_FIRST_FRAGMENT = rd.FIRST_FRAGMENT_TYPE
_NEXT_FRAGMENT = rd.NEXT_FRAGMENT_TYPE
_PREFIX = rd.FRAGMENT_PREFIX_LENGTH
_TAIL_WORD = rd.TAIL_POSITION_OFFSET // rd.WORD_LENGTH
_HEAD_WORD = rd.HEAD_POSITION_OFFSET // rd.WORD_LENGTH

# The general paths spell the layout's small numbers as literals, as the hot paths do; they
# are tied to ring_descriptor by ring_core's asserts (imported above).

WRITER_END = rd.WRITER_END_OFFSET
"""Selects the writer end in the end accessors."""

READER_END = rd.READER_END_OFFSET
"""Selects the reader end in the end accessors."""


def format_ring(buffer, capacity: int) -> None:
    """Lay out an empty ring in buffer (header + data area of capacity bytes).

    Only the header and the first frame header are written: the protocol never lets the reader
    look at a byte the writer did not zero first, so the data area need not be cleared (and its
    pages are not touched).
    """
    rd.check_capacity(capacity)
    view = memoryview(buffer).cast("B")
    if len(view) != rd.HEADER_LENGTH + capacity:
        raise ValueError(
            f"ring of capacity {capacity} needs {rd.HEADER_LENGTH + capacity} bytes,"
            f" buffer has {len(view)}")
    view[: rd.HEADER_LENGTH + _HEADER] = bytes(rd.HEADER_LENGTH + _HEADER)
    words = view[: rd.HEADER_LENGTH].cast("q")
    words[rd.CAPACITY_OFFSET // rd.WORD_LENGTH] = capacity
    words[rd.MAGIC_OFFSET // rd.WORD_LENGTH] = rd.MAGIC
    words.release()
    view.release()


class Ring(RING_CORE):
    """One end's handle on a ring laid out by format_ring.

    Ownership: the memory belongs to whoever mapped it (see shared_ring, connection). Exactly
    one thread of one process writes (try_write, claim, commit, abort) and exactly one thread of
    one process reads (read, release); each holds its own Ring over the same memory and keeps
    its side's positions in local fields. A Ring is not thread-safe.

    Writer: the tail lives in self._tail and is published after each commit; the head is
    cached in self._head_cache and re-read from shared memory only when the cache says full.
    Reader: self._read_position runs ahead over frames handed out by read(); release() makes it
    the head, so one head store can release a whole batch.
    Messages longer than a frame (module doc): self._outgoing is the writer's message part way
    out (the object naming it, a byte view of it from position ``base`` on or the fill
    function of try_write_filled, bytes sent, its type, its length, ``base``), and
    self._limit stays 0 while there is one, so every write takes the general path, which
    finishes it first;
    self._incoming is the reader's message part way in (its buffer, bytes copied, its type,
    the position of its first fragment).

    The per-frame fields and the hot paths (try_write of a data frame that fits, claim,
    commit, read, release, readable) are the base's: ring_core.RingCore, or its compiled twin
    (ring_core.RING_CORE), which calls the Python twin's method (the ``_slow`` names below)
    for whatever is not its fast path.
    """

    __slots__ = ("name", "_buffer", "_words", "_data_words", "fragment_length", "_incoming")

    _claim_slow = RingCore.claim
    _commit_slow = RingCore.commit
    _read_slow = RingCore.read
    _release_slow = RingCore.release
    _readable_slow = RingCore.readable

    def __init__(self, buffer, name: str = "ring") -> None:
        rd.require_store_order()
        view = memoryview(buffer).cast("B")
        if len(view) < rd.HEADER_LENGTH + rd.MIN_CAPACITY:
            raise ValueError(f"ring {name}: buffer of {len(view)} bytes is shorter than a ring"
                             f" ({rd.HEADER_LENGTH + rd.MIN_CAPACITY} bytes at least)")
        words = view[: rd.HEADER_LENGTH].cast("q")
        magic = words[rd.MAGIC_OFFSET // rd.WORD_LENGTH]
        capacity = words[rd.CAPACITY_OFFSET // rd.WORD_LENGTH]
        if magic != rd.MAGIC:
            words.release()
            raise ValueError(f"ring {name}: magic {magic:#x} found, expected {rd.MAGIC:#x}")
        if len(view) != rd.HEADER_LENGTH + capacity:
            words.release()
            raise ValueError(f"ring {name}: header says capacity {capacity} so"
                             f" {rd.HEADER_LENGTH + capacity} bytes, buffer has {len(view)}")
        self.name = name
        self.capacity = capacity
        self.max_frame_length = rd.max_frame_length(capacity)
        self.fragment_length = rd.fragment_length(capacity)
        self._outgoing = None
        self._incoming = None
        self._word = 0
        self._mask = capacity - 1
        self._buffer = view
        self._words = words
        self._data = view[rd.HEADER_LENGTH:]
        self._data_words = self._data.cast("q")
        self._tail = words[_TAIL_WORD]
        self._head_cache = words[_HEAD_WORD]
        self._limit = 0
        self._claim_index = -1
        self._claim_size = 0
        self._claim_type = 0
        self._readonly_data = self._data.toreadonly()
        self._head = self._head_cache
        self._read_position = self._head
        self._set_limit()
        self._bind(view)  # the compiled base's pointer (ring_core); released first

    # ------------------------------------------------------------------ writer

    def _write_general(self, frame, length: int, frame_type: int) -> bool:
        """try_write for any type, after validation and _make_room."""
        if self._outgoing is not None or length > self.max_frame_length:
            return self._write_message(frame, length, frame_type)
        if not self._make_room(length, frame_type):
            return False
        index = self._tail & self._mask
        self._data[index + 8: index + 8 + length] = frame
        self._publish(index, length, frame_type)
        return True

    def _publish(self, index: int, length: int, frame_type: int) -> None:
        """Commit the frame of length payload bytes written at index (the tail's): zero
        the next header, then the header word, then move the tail."""
        aligned = (length + 15) & -8
        words = self._data_words
        words[(index + aligned) >> 3] = 0
        words[index >> 3] = rd.header_word(length + 8, frame_type)
        tail = self._tail + aligned
        self._tail = tail
        self._words[_TAIL_WORD] = tail

    def abort(self) -> None:
        """Drop the open claim: nothing is published and its space is reused by the next frame."""
        if self._claim_index < 0:
            raise RuntimeError(f"ring {self.name}: abort() without an open claim()")
        self._claim_index = -1
        self._set_limit()

    def _set_limit(self) -> None:
        """Recompute the tail position a frame may reach: min(cached head + capacity, lap end)."""
        self._limit = min(self._head_cache, self._tail & ~self._mask) + self.capacity

    def _make_room(self, length: int, frame_type: int) -> bool:
        """Make the tail the start of room for a frame of length payload bytes.

        Validates the frame, re-reads the head when the cached one says there is no room (the
        head costs a cache miss: the reader writes it), and pads to the end of the data area
        when the frame must go to index 0. Returns False when there is no room now.
        """
        if self._claim_index >= 0:
            raise RuntimeError(f"ring {self.name}: a claim() is open; commit() or abort() first")
        if not 0 < frame_type <= rd.MAX_TYPE:
            raise ValueError(f"ring {self.name}: frame type must be in 1..{rd.MAX_TYPE},"
                             f" found {frame_type}")
        if length > self.max_frame_length:
            raise ValueError(
                f"ring {self.name}: frame of {length} bytes exceeds the largest frame this ring"
                f" can hold, {self.max_frame_length} bytes (capacity {self.capacity} bytes)")
        if length < 0:
            raise ValueError(f"ring {self.name}: frame length must be >= 0, found {length}")
        return self._room(length)

    def _room(self, length: int) -> bool:
        """_make_room after validation."""
        capacity = self.capacity
        required = ((length + 15) & -8) + _HEADER  # the frame plus the next header
        tail = self._tail
        if tail + required - self._head_cache > capacity:
            self._head_cache = self._words[_HEAD_WORD]
            self._set_limit()
            if tail + required - self._head_cache > capacity:
                return False
        index = tail & self._mask
        to_end = capacity - index
        if required <= to_end:
            return True
        # Wrap-around: the frame goes to index 0, in front of the reader's head index. With
        # room for required bytes the head is on this lap, so its index is <= ours.
        if required > self._head_cache & self._mask:
            self._head_cache = self._words[_HEAD_WORD]
            if required > self._head_cache & self._mask:
                self._set_limit()
                return False
        words = self._data_words
        words[0] = 0  # where the reader goes after the padding: "empty" before the commit
        words[index >> 3] = rd.header_word(to_end, _PADDING)
        tail += to_end
        self._tail = tail
        self._words[_TAIL_WORD] = tail
        self._set_limit()
        return True

    # ------------------------------------------------------------------ messages (writer)

    @property
    def sending(self) -> bool:
        """True while a message longer than a frame is part way out (writer)."""
        return self._outgoing is not None

    @property
    def sending_message(self):
        """The object naming the message part way out (the frame given to try_write, the
        key given to try_write_filled), or None."""
        return self._outgoing[0] if self._outgoing is not None else None

    def try_write_filled(self, key, length: int, fill, frame_type: int = rd.DATA_TYPE) -> bool:
        """try_write of a message of length bytes that fill(view, start) writes straight into
        the ring: fill puts the message's bytes from start on into view (len(view) of them),
        so a message made of pieces (fields and file contents, say) is copied once, into
        the ring, never assembled first. One that fits a frame is one fill of a claimed
        frame; a longer one is filled fragment by fragment, and what does not fit now is
        filled into a buffer of its own before this returns False, so fill and what it
        reads from are used during this call only. As for try_write, False means call
        again with the same key (any object naming the message) until True: with
        sending_message the key, the ring holds the rest; else none of it was taken, and
        the next call fills it all again."""
        outgoing = self._outgoing
        if outgoing is not None:
            if outgoing[0] is key:
                return self._send_fragments()
            if not self._send_fragments():
                return False
        if length > self.max_frame_length:
            return self._start_message(key, length, frame_type, fill)
        if not self._make_room(length, frame_type):
            return False
        index = self._tail & self._mask
        fill(self._data[index + 8: index + 8 + length], 0)
        self._publish(index, length, frame_type)
        return True

    def _write_message(self, frame, length: int, frame_type: int) -> bool:
        """try_write of a message longer than a frame, or of any frame while one is part way
        out (which goes first)."""
        outgoing = self._outgoing
        if outgoing is not None:
            if outgoing[0] is frame:
                return self._send_fragments()
            if not self._send_fragments():
                return False
            return self._write_general(frame, length, frame_type)
        return self._start_message(frame, length, frame_type, None)

    def _start_message(self, key, length: int, frame_type: int, fill) -> bool:
        """Begin writing a message longer than a frame: from key's bytes (fill None) or
        through fill (try_write_filled)."""
        if self._claim_index >= 0:
            raise RuntimeError(f"ring {self.name}: a claim() is open; commit() or abort() first")
        if not 0 < frame_type <= rd.MAX_TYPE:
            raise ValueError(f"ring {self.name}: frame type must be in 1..{rd.MAX_TYPE},"
                             f" found {frame_type}")
        if length > rd.MAX_MESSAGE_LENGTH:
            raise ValueError(f"ring {self.name}: message of {length} bytes exceeds the longest"
                             f" a ring carries, {rd.MAX_MESSAGE_LENGTH} bytes")
        if fill is None:
            self._outgoing = [key, memoryview(key).cast("B"), 0, frame_type, length, 0]
            return self._send_fragments()
        self._outgoing = [key, fill, 0, frame_type, length, 0]
        if self._send_fragments():
            return True
        # Out of room: take the rest now (the docstring's promise), as bytes from here on.
        outgoing = self._outgoing
        sent = outgoing[2]
        rest = memoryview(bytearray(length - sent))
        fill(rest, sent)
        outgoing[1], outgoing[5] = rest, sent
        return False

    def _send_fragments(self) -> bool:
        """Write the fragments of the message part way out while there is room; True once
        the last is out. The source (self._outgoing[1]) is a byte view of the message from
        position self._outgoing[5] on, or a fill function (try_write_filled)."""
        outgoing = self._outgoing
        _, source, sent, message_type, total, base = outgoing
        view = source if source.__class__ is memoryview else None
        chunk = self.fragment_length
        data, words = self._data, self._data_words
        while sent < total:
            if sent:
                piece = min(chunk, total - sent)
                size, frame_type, start = piece, _NEXT_FRAGMENT, 8
            else:
                piece = min(chunk - _PREFIX, total)
                size, frame_type, start = piece + _PREFIX, _FIRST_FRAGMENT, 8 + _PREFIX
            if not self._room(size):
                outgoing[2] = sent
                self._limit = 0  # later writes take the general path, which finishes this
                return False
            index = self._tail & self._mask
            if not sent:
                words[(index + 8) >> 3] = rd.header_word(total, message_type)
            if view is not None:
                data[index + start: index + start + piece] = view[sent - base:
                                                                   sent - base + piece]
            else:
                source(data[index + start: index + start + piece], sent)
            aligned = (size + 15) & -8
            words[(index + aligned) >> 3] = 0
            words[index >> 3] = rd.header_word(size + 8, frame_type)
            tail = self._tail + aligned
            self._tail = tail
            self._words[_TAIL_WORD] = tail
            sent += piece
        if view is not None:
            view.release()
        self._outgoing = None
        self._set_limit()
        return True

    # ------------------------------------------------------------------ reader

    def _read_special(self):
        """read() from a padding or fragment header on: skip padding, copy fragments into the
        message being assembled, and return the next frame or whole message (or None)."""
        data_words, mask = self._data_words, self._mask
        while True:
            position = self._read_position
            index = position & mask
            word = data_words[index >> 3]
            if not word:
                return None
            length = word & _LOW_HALF
            frame_type = word >> 32
            if word > 0:
                if self._incoming is not None:
                    raise ValueError(f"ring {self.name}: a frame of type {frame_type} at"
                                     f" position {position} inside a fragmented message")
                self._read_position = position + ((length + 7) & -8)
                self._word = word
                return self._readonly_data[index + 8: index + length]
            self._read_position = position + ((length + 7) & -8)
            if frame_type == _PADDING:
                continue
            incoming = self._incoming
            if frame_type == _FIRST_FRAGMENT and incoming is None:
                prefix = data_words[(index + 8) >> 3]
                total, message_type = prefix & _LOW_HALF, prefix >> 32
                start = index + 8 + _PREFIX
                incoming = self._incoming = [bytearray(total), 0, message_type, position]
            elif frame_type == _NEXT_FRAGMENT and incoming is not None:
                start = index + 8
            else:
                raise ValueError(f"ring {self.name}: frame of type {frame_type} at position"
                                 f" {position} out of place"
                                 f" ({'inside' if incoming else 'outside'} a fragmented"
                                 f" message)")
            buffer, filled = incoming[0], incoming[1]
            piece = index + length - start
            if not 0 <= piece <= len(buffer) - filled:
                raise ValueError(f"ring {self.name}: fragment at position {position} runs"
                                 f" past the end of its {len(buffer)}-byte message")
            buffer[filled: filled + piece] = self._readonly_data[start: index + length]
            filled += piece
            incoming[1] = filled
            if self._head >= incoming[3]:  # nothing handed out before it is held: free it
                self._head = self._read_position
                self._words[_HEAD_WORD] = self._head
            if filled == len(buffer):
                self._incoming = None
                self._word = rd.header_word(0, incoming[2])
                return memoryview(buffer).toreadonly()

    @property
    def assembling(self) -> bool:
        """True while a message longer than a frame is part way in (reader)."""
        return self._incoming is not None

    # ------------------------------------------------------------------ shared state

    @property
    def tail_position(self) -> int:
        """Bytes ever written, as published by the writer."""
        return self._words[_TAIL_WORD]

    @property
    def head_position(self) -> int:
        """Bytes ever released, as published by the reader."""
        return self._words[_HEAD_WORD]

    @property
    def header_words(self):
        """The header as a memoryview of i64 words (for parked flags; see wakeup.WakeSlot)."""
        return self._words

    def set_end(self, end: int, pid: int, start_time: int) -> None:
        """Record which process holds an end (WRITER_END or READER_END); the pid goes last."""
        words = self._words
        words[(end + rd.END_START_TIME_OFFSET) >> 3] = start_time
        words[(end + rd.END_PID_OFFSET) >> 3] = pid

    def end_process(self, end: int) -> tuple[int, int]:
        """(pid, start time) recorded for an end; pid 0 while nobody attached."""
        words = self._words
        return (words[(end + rd.END_PID_OFFSET) >> 3],
                words[(end + rd.END_START_TIME_OFFSET) >> 3])

    def set_end_doorbell(self, end: int, broker_id: int) -> None:
        """Record that the process at an end is woken through broker broker_id's doorbell
        (ring_descriptor.END_DOORBELL_OFFSET); write it before the peer attaches."""
        if broker_id < 0:
            raise ValueError(f"broker id must be >= 0, found {broker_id}")
        self._words[(end + rd.END_DOORBELL_OFFSET) >> 3] = broker_id + 1

    def end_doorbell(self, end: int) -> int | None:
        """The broker id whose doorbell wakes an end, or None: the ring's own semaphore."""
        value = self._words[(end + rd.END_DOORBELL_OFFSET) >> 3]
        return value - 1 if value > 0 else None

    def close_end(self, end: int) -> None:
        """Mark an end closed (for the writer end: no more frames will come)."""
        self._words[(end + rd.END_CLOSED_OFFSET) >> 3] = 1

    def end_closed(self, end: int) -> bool:
        """True once the end was marked closed."""
        return self._words[(end + rd.END_CLOSED_OFFSET) >> 3] != 0

    def release_views(self) -> None:
        """Drop this handle's views of the memory so the mapping can be closed.

        Views handed out by read() and claim() are the caller's to drop. The Ring is unusable
        afterwards.
        """
        self._unbind()
        for view in (self._readonly_data, self._data_words, self._data, self._words,
                     self._buffer):
            view.release()
