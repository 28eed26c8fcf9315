"""The ring's per-frame state and its hot paths, in pure Python.

``RingCore`` is the base of ``ring.Ring``: the fields a frame changes (the writer's tail,
cached head, limit and open claim; the reader's head, read position and last header word)
with the views and numbers the hot paths read, and the hot paths themselves — ``try_write``
of a data frame that fits, ``claim``, ``commit``, ``read``, ``release``, ``readable``. Their
compiled twin, ``shm_ring/_ring_accel.pyx`` (``shm_ring.accel``), has the same fields and
does the same stores in the same order in C; ``RING_CORE`` is the one ``Ring`` inherits.
Everything else (wrap-around, fragments, padding, validation and its errors) is ``Ring``'s
Python code on either base, and the compiled twin calls this class's methods for whatever
is not its fast path (``Ring._claim_slow`` and the like), so both answer alike.

The layout and the store-order protocol are in ring_descriptor; ownership is ``Ring``'s
(one writing thread, one reading thread, each with its own handle).
"""
from __future__ import annotations

from shm_ring import accel, ring_descriptor as rd

_DATA_HEADER = rd.header_word(rd.FRAME_HEADER_LENGTH, rd.DATA_TYPE)
_LOW_HALF = 0xFFFF_FFFF
_TAIL_WORD = rd.TAIL_POSITION_OFFSET // rd.WORD_LENGTH
_HEAD_WORD = rd.HEAD_POSITION_OFFSET // rd.WORD_LENGTH

# The hot paths spell the layout's small numbers as literals, because CPython folds a
# literal into the bytecode and looks a name up on every use (a module global, or rd.X, per
# record). Each literal is tied here to ring_descriptor, so a change of the layout fails at
# import instead of writing frames the other end misreads:
assert rd.FRAME_HEADER_LENGTH == 8  # "+ 8": a frame's payload starts after its header
assert rd.FRAME_ALIGNMENT == 8  # "& -8", "+ 7": rd.align(n) == (n + 7) & -8
assert rd.FRAME_HEADER_LENGTH + rd.FRAME_ALIGNMENT - 1 == 15  # "(length + 15) & -8" is
#   rd.align(rd.FRAME_HEADER_LENGTH + length): the header plus the payload, aligned
assert rd.WORD_LENGTH == 1 << 3  # ">> 3": a byte index to an index into the data's words
assert rd.DATA_TYPE == 1  # "frame_type != 1": only data frames take try_write's fast path
assert rd.FRAME_TYPE_OFFSET == 4 and rd.header_word(0, 1) == 1 << 32  # ">> 32": the type
#   is the header word's high half (its length the low half, _LOW_HALF)


class RingCore:
    """A ring handle's per-frame state and hot paths (module doc). ``_bind`` and ``_unbind``
    are the compiled twin's hold on the memory; here the views are the hold."""

    __slots__ = ("capacity", "max_frame_length", "_mask", "_tail", "_head_cache", "_limit",
                 "_claim_index", "_claim_size", "_claim_type", "_head", "_read_position",
                 "_word", "_data", "_readonly_data", "_outgoing")

    def _bind(self, buffer) -> None:
        """The compiled twin takes a pointer to the memory here; nothing to do in Python."""

    def _unbind(self) -> None:
        """The compiled twin drops its pointer here; nothing to do in Python."""

    # ------------------------------------------------------------------ writer

    def try_write(self, frame, frame_type: int = rd.DATA_TYPE) -> bool:
        """Copy frame (bytes-like, format "B") into the ring and publish it.

        Returns False when the ring has no room now (back-pressure: try again after the reader
        releases). A frame longer than max_frame_length goes as fragments (module doc): False
        then may mean part of it is out; call again with the same object until True (another
        frame's write finishes it first). Raises ValueError for a frame longer than
        MAX_MESSAGE_LENGTH or a type outside 1..MAX_TYPE, RuntimeError while a claim is open.
        """
        length = len(frame)
        aligned = (length + 15) & -8  # align(header + payload)
        tail = self._tail
        # One comparison covers "room before the reader's head" and "room before the end of
        # the data area" (self._limit; an open claim sets it to 0). Everything else (other
        # types, wrap-around, a stale cached head, errors) takes the general path.
        if (tail + aligned + 8 > self._limit or length > self.max_frame_length
                or frame_type != 1):
            return self._write_general(frame, length, frame_type)
        index = tail & self._mask
        self._data[index + 8: index + 8 + length] = frame
        words = self._data_words
        words[(index + aligned) >> 3] = 0  # the next header reads "empty" before we commit
        words[index >> 3] = length + _DATA_HEADER  # the commit
        tail += aligned
        self._tail = tail
        self._words[_TAIL_WORD] = tail
        return True

    def claim(self, size: int, frame_type: int = rd.DATA_TYPE):
        """Reserve a frame of up to size payload bytes; return a writable view of the payload.

        Returns None when the ring has no room now. Fill the view, then commit(length) with the
        number of bytes actually written (<= size), or abort(). Nothing is visible to the reader
        before commit. Raises ValueError for a frame longer than max_frame_length (write a
        longer message with try_write) or a bad type. A message part way out is finished
        first (None while it cannot be).
        """
        if self._outgoing is not None and not self._send_fragments():
            return None
        if not self._make_room(size, frame_type):
            return None
        index = self._tail & self._mask
        self._claim_index = index
        self._claim_size = size
        self._claim_type = frame_type
        self._limit = 0  # sends try_write to _make_room, which refuses while the claim is open
        return self._data[index + 8: index + 8 + size]

    def commit(self, length: int | None = None) -> None:
        """Publish the claimed frame with length payload bytes (default: all that was claimed)."""
        index = self._claim_index
        if index < 0:
            raise RuntimeError(f"ring {self.name}: commit() without an open claim()")
        if length is None:
            length = self._claim_size
        elif not 0 <= length <= self._claim_size:
            raise ValueError(f"ring {self.name}: commit of {length} bytes, claimed"
                             f" {self._claim_size}")
        aligned = (length + 15) & -8
        words = self._data_words
        words[(index + aligned) >> 3] = 0
        words[index >> 3] = rd.header_word(length + 8, self._claim_type)
        self._claim_index = -1
        tail = self._tail + aligned
        self._tail = tail
        self._words[_TAIL_WORD] = tail
        self._set_limit()

    # ------------------------------------------------------------------ reader

    def read(self):
        """The payload of the next committed frame as a read-only view, or None if there is none.

        Sets frame_type. The view stays valid until release(); frames read and not yet
        released may be held together (release() frees all of them at once). A message that
        came as fragments is returned whole, as a view of a buffer of its own (valid for as
        long as it is referenced); None while its last fragment has not arrived.
        """
        position = self._read_position
        index = position & self._mask
        word = self._data_words[index >> 3]
        if not word:
            return None
        if word < 0:  # padding or a fragment: the only negative types
            return self._read_special()
        length = word & _LOW_HALF
        self._read_position = position + ((length + 7) & -8)
        self._word = word
        return self._readonly_data[index + 8: index + length]

    @property
    def frame_type(self) -> int:
        """Type of the frame last returned by read()."""
        return self._word >> 32

    def release(self) -> None:
        """Give back the space of every frame read so far (the head advances past them)."""
        position = self._read_position
        if position != self._head:
            self._head = position
            self._words[_HEAD_WORD] = position

    def readable(self) -> bool:
        """True when the header at the read position is committed (a frame or padding)."""
        return self._data_words[(self._read_position & self._mask) >> 3] != 0


#: The compiled module (shm_ring/_ring_accel.pyx), or None (``accel``).
COMPILED = accel.load("shm_ring._ring_accel")
#: The base Ring inherits: the compiled twin when it is available.
RING_CORE = RingCore if COMPILED is None else COMPILED.RingCore
