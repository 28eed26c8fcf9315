"""Unit tests of the ring layout and the single-producer/single-consumer ring (one process).

Every test runs on both cores of the ring (tests/support/ring_cores.py: the pure-Python
``ring_core.RingCore`` and its compiled twin), except the store-order traces, which follow
the Python bytecode (the compiled twin's order is the same stores, release-ordered: its
module doc; test_accel compares the bytes both leave)."""
from __future__ import annotations

import struct
import sys

import pytest

from shm_ring import ring_descriptor as rd
from shm_ring.ring import READER_END, WRITER_END, Ring, format_ring
from tests.support.ring_cores import CORES, ring_class

_RING = [Ring]  # the class make_ring makes: the core's (the autouse fixture)


@pytest.fixture(autouse=True, params=CORES)
def core(request):
    """Run each test on each core of the ring."""
    _RING[0] = ring_class(request.param)
    yield request.param
    _RING[0] = Ring


def make_ring(capacity: int = 256, fill: int = 0xAB) -> tuple[bytearray, Ring, Ring]:
    """A ring over a bytearray whose data area holds garbage (the protocol must not care)."""
    memory = bytearray([fill]) * rd.ring_length(capacity)
    format_ring(memory, capacity)
    ring = _RING[0]
    return memory, ring(memory, "test-writer"), ring(memory, "test-reader")


def header_at(memory: bytearray, index: int) -> tuple[int, int]:
    """(length, type) of the frame header at a data index."""
    return struct.unpack_from("<ii", memory, rd.HEADER_LENGTH + index)


def drain(reader: Ring) -> list[bytes]:
    frames = []
    while (view := reader.read()) is not None:
        frames.append(bytes(view))
    reader.release()
    return frames


# --------------------------------------------------------------------------- descriptor

def test_header_fields_sit_on_separate_cache_line_pairs():
    offsets = [rd.TAIL_POSITION_OFFSET, rd.HEAD_POSITION_OFFSET, rd.READER_PARKED_OFFSET,
               rd.WRITER_PARKED_OFFSET, rd.WRITER_END_OFFSET, rd.READER_END_OFFSET,
               rd.HEADER_LENGTH]
    assert all(offset % (2 * rd.CACHE_LINE_LENGTH) == 0 for offset in offsets)
    assert all(b - a == 2 * rd.CACHE_LINE_LENGTH for a, b in zip(offsets, offsets[1:]))
    assert rd.MAGIC_OFFSET < rd.CAPACITY_OFFSET < rd.TAIL_POSITION_OFFSET


def test_header_word_is_length_then_type_little_endian():
    word = rd.header_word(24, 7)
    assert struct.pack("<q", word) == struct.pack("<ii", 24, 7)
    assert struct.pack("<q", rd.header_word(64, rd.PADDING_TYPE)) == struct.pack("<ii", 64, -1)


@pytest.mark.parametrize("capacity", [0, 32, 100, 3 << 10, 2**31])
def test_capacity_must_be_a_power_of_two_in_range(capacity):
    with pytest.raises(ValueError, match=f"found {capacity}"):
        rd.check_capacity(capacity)


def test_refuses_machines_without_total_store_order():
    with pytest.raises(RuntimeError, match="'aarch64'.*x86_64"):
        rd.require_store_order("aarch64")
    rd.require_store_order("x86_64")


def test_ring_refuses_to_start_on_other_architectures(monkeypatch):
    memory = bytearray(rd.ring_length(64))
    format_ring(memory, 64)
    monkeypatch.setattr(rd.platform, "machine", lambda: "ppc64le")
    with pytest.raises(RuntimeError, match="ppc64le"):
        Ring(memory)


def test_open_checks_magic_and_size():
    memory = bytearray(rd.ring_length(64))
    with pytest.raises(ValueError, match="magic 0x0 found"):
        Ring(memory)
    format_ring(memory, 64)
    with pytest.raises(ValueError, match="capacity 64 .* buffer has"):
        Ring(memory + bytearray(8))


# --------------------------------------------------------------------------- writing, reading

def test_frames_come_out_in_order_with_their_types():
    _, writer, reader = make_ring()
    assert writer.try_write(b"first")
    assert writer.try_write(b"", frame_type=5)
    assert writer.try_write(bytearray(b"third"), frame_type=rd.MAX_TYPE)
    seen = []
    while (view := reader.read()) is not None:
        seen.append((bytes(view), reader.frame_type))
    assert seen == [(b"first", 1), (b"", 5), (b"third", rd.MAX_TYPE)]


def test_frames_are_aligned_to_eight_bytes_and_length_counts_the_header():
    memory, writer, _ = make_ring()
    for size in (1, 7, 8, 9):
        writer.try_write(b"x" * size)
    index = 0
    for size in (1, 7, 8, 9):
        length, frame_type = header_at(memory, index)
        assert (length, frame_type) == (size + rd.FRAME_HEADER_LENGTH, rd.DATA_TYPE)
        index += rd.align(length)
        assert index % rd.FRAME_ALIGNMENT == 0
    assert writer.tail_position == index


def test_the_next_header_is_zeroed_before_the_commit():
    memory, writer, _ = make_ring()
    writer.try_write(b"abc")
    assert header_at(memory, 16) == (0, 0)  # was 0xABABABAB garbage
    assert memory[rd.HEADER_LENGTH + 24] == 0xAB  # nothing beyond the next header is touched


def test_read_view_is_read_only_and_stays_until_release():
    _, writer, reader = make_ring()
    writer.try_write(b"payload")
    view = reader.read()
    with pytest.raises(TypeError):
        view[0] = 1
    assert writer.head_position == 0
    reader.release()
    assert writer.head_position == 16


def test_release_frees_a_batch_with_one_head_store():
    _, writer, reader = make_ring()
    for i in range(5):
        writer.try_write(bytes([i]) * 3)
    assert [bytes(reader.read()) for _ in range(3)] == [b"\0\0\0", b"\1\1\1", b"\2\2\2"]
    assert reader.head_position == 0
    reader.release()
    assert reader.head_position == 3 * 16
    assert drain(reader) == [b"\3\3\3", b"\4\4\4"]
    assert reader.head_position == writer.tail_position == 5 * 16


def test_empty_ring_reads_none_and_is_not_readable():
    _, _, reader = make_ring()
    assert reader.read() is None
    assert not reader.readable()


# --------------------------------------------------------------------------- back-pressure

def test_full_ring_returns_false_then_accepts_after_release():
    _, writer, reader = make_ring(capacity=256)
    frame = b"y" * 40  # 48 bytes a frame; 8 more reserved for the next header
    written = 0
    while writer.try_write(frame):
        written += 1
    assert written == (256 - 8) // 48
    assert writer.try_write(frame) is False  # still full: the head did not move
    assert reader.read() is not None
    assert writer.try_write(frame) is False  # read but not released
    reader.release()
    # 48 bytes free at index 0 and 16 at the end: the frame must wrap and needs 56 at index 0.
    assert writer.try_write(frame) is False
    assert reader.read() is not None
    reader.release()
    assert writer.try_write(frame) is True
    assert len(drain(reader)) == written - 1


def test_writer_rereads_the_head_only_when_its_cache_says_full():
    memory, writer, reader = make_ring(capacity=256)
    writer.try_write(b"a" * 8)
    reader.read()
    reader.release()
    # The writer still caches head 0: with room left it does not look at the real head.
    assert writer._head_cache == 0
    while writer.try_write(b"b" * 8):
        pass
    assert writer._head_cache == reader.head_position == 16


# --------------------------------------------------------------------------- wrap-around

def test_wrap_around_writes_a_padding_frame_and_continues_at_index_zero():
    memory, writer, reader = make_ring(capacity=256)
    for _ in range(3):
        assert writer.try_write(b"z" * 56)  # 64 bytes each: tail at index 192
    assert drain(reader) == [b"z" * 56] * 3
    assert writer.try_write(b"w" * 56)  # needs 64 + 8, only 64 left before the end
    assert header_at(memory, 192) == (64, rd.PADDING_TYPE)
    assert header_at(memory, 0) == (64, rd.DATA_TYPE)
    assert writer.tail_position == 256 + 64
    assert drain(reader) == [b"w" * 56]
    assert reader.head_position == 256 + 64


def test_padding_is_not_written_while_index_zero_is_still_unread():
    memory, writer, reader = make_ring(capacity=256)
    for _ in range(3):
        writer.try_write(b"z" * 56)
    assert writer.try_write(b"w" * 56) is False  # the frame would overrun the unread head
    assert header_at(memory, 192) == (0, 0)  # no padding committed
    reader.read()
    reader.release()  # head index 64: 64 bytes at index 0, but the frame + next header need 72
    assert writer.try_write(b"w" * 56) is False
    assert header_at(memory, 192) == (0, 0)
    reader.read()
    reader.release()  # head index 128
    assert writer.try_write(b"w" * 56)
    assert drain(reader) == [b"z" * 56, b"w" * 56]


def test_many_laps_of_random_sizes_keep_order_and_content():
    import random
    rng = random.Random(7)
    _, writer, reader = make_ring(capacity=1024)
    sent = received = 0
    for _ in range(20000):
        size = rng.choice((0, 1, 5, 8, 13, 100, 200, writer.max_frame_length))
        frame = bytes([sent % 251]) * size
        while not writer.try_write(frame):
            for view in iter(reader.read, None):
                assert bytes(view) == bytes([received % 251]) * len(view)
                received += 1
            reader.release()
        sent += 1
    received += len(drain(reader))
    assert received == sent
    assert writer.tail_position > 100 * writer.capacity  # wrapped many times


# --------------------------------------------------------------------------- errors

def test_oversize_claim_raises_naming_both_sizes():
    _, writer, _ = make_ring(capacity=1024)
    assert writer.max_frame_length == 1024 // 2 - 16
    assert writer.claim(writer.max_frame_length) is not None
    writer.abort()
    with pytest.raises(ValueError, match=r"frame of 497 bytes exceeds .* 496 bytes"
                                         r" \(capacity 1024 bytes\)"):
        writer.claim(497)


def test_a_message_longer_than_the_max_length_is_refused():
    class Huge:
        def __len__(self):
            return rd.MAX_MESSAGE_LENGTH + 1
    _, writer, _ = make_ring()
    with pytest.raises(ValueError, match=f"message of {rd.MAX_MESSAGE_LENGTH + 1} bytes"):
        writer.try_write(Huge())


def test_largest_frame_always_fits_eventually_wherever_the_head_is():
    # An empty ring whose head sits mid-area still takes a max-size frame (after padding).
    for head_index in range(0, 256, 8):
        _, writer, reader = make_ring(capacity=256)
        for _ in range(head_index // 8):
            assert writer.try_write(b"")  # 8 bytes each
        drain(reader)
        assert writer.try_write(b"M" * writer.max_frame_length), head_index
        assert drain(reader) == [b"M" * writer.max_frame_length]


@pytest.mark.parametrize("frame_type", [0, -1, -7, rd.MAX_TYPE + 1])
def test_reserved_or_out_of_range_types_are_refused(frame_type):
    _, writer, _ = make_ring()
    with pytest.raises(ValueError, match=f"found {frame_type}"):
        writer.try_write(b"x", frame_type)


# --------------------------------------------------------------------------- claim / commit

def test_claim_fills_in_place_and_the_length_stays_zero_until_commit():
    memory, writer, reader = make_ring()
    view = writer.claim(32)
    view[:5] = b"hello"
    assert header_at(memory, 0) == (0, 0)  # payload written, not committed
    assert reader.read() is None
    writer.commit(5)
    assert header_at(memory, 0) == (13, rd.DATA_TYPE)
    assert bytes(reader.read()) == b"hello"
    assert writer.tail_position == 16  # the unused part of the claim is given back


def test_commit_defaults_to_the_claimed_size_and_keeps_the_claimed_type():
    _, writer, reader = make_ring()
    writer.claim(3, frame_type=9)[:] = b"abc"
    writer.commit()
    assert bytes(reader.read()) == b"abc" and reader.frame_type == 9


def test_claim_misuse_raises():
    _, writer, reader = make_ring()
    with pytest.raises(RuntimeError, match="without an open claim"):
        writer.commit(1)
    writer.claim(8)
    with pytest.raises(RuntimeError, match="claim\\(\\) is open"):
        writer.try_write(b"x")
    with pytest.raises(ValueError, match="commit of 9 bytes, claimed 8"):
        writer.commit(9)
    writer.abort()
    assert reader.read() is None
    assert writer.try_write(b"after")  # the aborted space is reused
    assert drain(reader) == [b"after"]


def test_claim_returns_none_when_full_and_can_wrap():
    _, writer, reader = make_ring(capacity=256)
    for _ in range(3):
        writer.try_write(b"z" * 56)
    assert writer.claim(56) is None
    drain(reader)
    view = writer.claim(56)
    view[:] = b"c" * 56
    writer.commit()
    assert drain(reader) == [b"c" * 56]


# --------------------------------------------------------------------------- order of stores

def _trace_states(memory: bytearray, call, index: int, size: int, next_index: int):
    """Run call() tracing every bytecode of the ring's methods; return the distinct states of
    (header word, payload, next header) seen between instructions, in order."""
    states = []

    def snapshot():
        base = rd.HEADER_LENGTH
        state = (struct.unpack_from("<q", memory, base + index)[0],
                 bytes(memory[base + index + 8: base + index + 8 + size]),
                 struct.unpack_from("<q", memory, base + next_index)[0])
        if not states or states[-1] != state:
            states.append(state)

    def tracer(frame, event, arg):
        if frame.f_code.co_filename.endswith(("ring.py", "ring_core.py")):
            frame.f_trace_opcodes = True
            snapshot()
            return tracer
        return None

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    snapshot()
    return states


def test_try_write_stores_payload_then_next_header_then_length(core):
    if core != "python":
        pytest.skip("traces the Python bytecode")
    memory, writer, _ = make_ring()
    payload = b"0123456789"
    states = _trace_states(memory, lambda: writer.try_write(payload), 0, 10, 24)
    garbage_next = struct.unpack_from("<q", b"\xab" * 8)[0]
    assert states[0] == (0, b"\xab" * 10, garbage_next)
    assert states[1:] == [
        (0, payload, garbage_next),  # 1. payload
        (0, payload, 0),  # 2. the next header reads "empty"
        (rd.header_word(18, rd.DATA_TYPE), payload, 0),  # 3. the length: the commit
    ]


def test_wrap_around_zeroes_index_zero_before_committing_the_padding():
    memory, writer, reader = make_ring(capacity=256)
    for _ in range(3):
        writer.try_write(b"z" * 56)
    drain(reader)
    memory[rd.HEADER_LENGTH: rd.HEADER_LENGTH + 8] = b"\xab" * 8  # stale bytes at index 0
    states = _trace_states(memory, lambda: writer.try_write(b"w" * 56), 192, 0, 0)
    garbage = struct.unpack_from("<q", b"\xab" * 8)[0]
    padding = rd.header_word(64, rd.PADDING_TYPE)
    # (padding header, -, header at index 0)
    assert [(h, n) for h, _, n in states] == [
        (0, garbage), (0, 0), (padding, 0), (padding, rd.header_word(64, rd.DATA_TYPE))]


def test_ends_record_process_and_closed_flag():
    _, writer, reader = make_ring()
    assert writer.end_process(WRITER_END) == (0, 0)
    writer.set_end(WRITER_END, 1234, 5678)
    assert reader.end_process(WRITER_END) == (1234, 5678)
    assert not reader.end_closed(WRITER_END)
    writer.close_end(WRITER_END)
    assert reader.end_closed(WRITER_END) and not reader.end_closed(READER_END)


# --------------------------------------------------------------------------- long messages

def test_a_message_many_times_the_capacity_streams_through_as_fragments():
    memory, writer, reader = make_ring(capacity=256)
    message = bytes(range(256)) * 9 + b"end"  # 2307 bytes, max frame 112
    assert not writer.try_write(message, 5)  # the ring filled part way through
    assert writer.sending
    length, frame_type = header_at(memory, 0)
    assert frame_type == rd.FIRST_FRAGMENT_TYPE
    assert length == 8 + rd.fragment_length(256)
    assert struct.unpack_from("<ii", memory, rd.HEADER_LENGTH + 8) == (len(message), 5)
    assert header_at(memory, 8 + rd.fragment_length(256))[1] == rd.NEXT_FRAGMENT_TYPE
    rounds = 0
    while (view := reader.read()) is None:
        assert reader.assembling  # copied out and freed as it went: the writer goes on
        assert reader.head_position == reader.tail_position
        assert not writer.try_write(message, 5) or not writer.sending
        rounds += 1
    assert rounds > 5
    assert bytes(view) == message and reader.frame_type == 5
    assert not writer.sending and not reader.assembling
    assert writer.try_write(b"after")  # the common path again
    assert drain(reader) == [b"after"]


def test_a_long_message_waits_behind_held_frames_and_overwrites_none():
    _, writer, reader = make_ring(capacity=256)
    assert writer.try_write(b"held")
    held = reader.read()
    message = b"L" * 1000
    while not writer.try_write(message):
        assert reader.read() is None
        if writer.tail_position - reader.head_position > 200:
            break  # full: nothing after the held frame could be freed
    assert bytes(held) == b"held"  # still intact, the fragments wait behind it
    del held
    reader.release()
    while (view := reader.read()) is None:
        writer.try_write(message)
    assert bytes(view) == message


def test_another_write_or_claim_finishes_the_message_part_way_out_first():
    _, writer, reader = make_ring(capacity=256)
    message = b"M" * 600
    assert not writer.try_write(message)
    assert not writer.try_write(b"small")  # the message is not out yet: nothing written
    assert writer.claim(8) is None
    received = []
    while not writer.try_write(b"small"):
        received += drain(reader)
    assert writer.claim(8) is not None
    writer.commit(3)
    received += drain(reader)
    assert received[0] == message
    assert received[1] == b"small" and len(received) == 3


def test_random_laps_of_frames_and_long_messages_keep_order_content_and_type():
    import random
    rng = random.Random(11)
    for capacity in (64, 256, 4096):
        _, writer, reader = make_ring(capacity=capacity)
        sent, received = [], []
        for number in range(1500):
            size = rng.choice((0, 1, 13, writer.max_frame_length, writer.max_frame_length + 1,
                               capacity, 3 * capacity + 5, rng.randrange(10 * capacity)))
            frame, frame_type = bytes([number % 251]) * size, rng.choice((1, 1, 7))
            while not writer.try_write(frame, frame_type):
                while (view := reader.read()) is not None:
                    received.append((bytes(view), reader.frame_type))
                    if rng.random() < 0.5:
                        reader.release()
                if rng.random() < 0.7:
                    reader.release()
            sent.append((frame, frame_type))
        while (view := reader.read()) is not None:
            received.append((bytes(view), reader.frame_type))
        assert received == sent, capacity


class Filler:
    """A message made of pieces, written by try_write_filled: ``calls`` records each
    fill(view, start); ``expired`` makes a later call fail (its source is gone)."""

    def __init__(self, pieces):
        self.pieces = pieces
        self.message = b"".join(pieces)
        self.calls = []
        self.expired = False

    def __call__(self, view, start):
        assert not self.expired, "fill called after try_write_filled returned"
        self.calls.append((start, len(view)))
        view[:] = self.message[start:start + len(view)]


def test_a_filled_message_that_fits_a_frame_is_one_fill_in_place():
    _, writer, reader = make_ring(capacity=256)
    filler = Filler([b"head:", b"x" * 50])
    assert writer.try_write_filled(filler, len(filler.message), filler, 7)
    assert filler.calls == [(0, 55)]
    view = reader.read()
    assert bytes(view) == filler.message and reader.frame_type == 7


def test_a_long_filled_message_is_filled_fragment_by_fragment_and_the_rest_at_once():
    _, writer, reader = make_ring(capacity=256)
    filler = Filler([bytes(range(256)) * 4, b"tail"])
    total = len(filler.message)
    assert not writer.try_write_filled(filler, total, filler, 3)  # more than the ring holds
    chunk = rd.fragment_length(256)
    first = chunk - rd.FRAGMENT_PREFIX_LENGTH
    # Fragments straight into the ring while there was room, then the rest in one piece.
    assert filler.calls[:2] == [(0, first), (first, chunk)]
    sent = sum(length for _, length in filler.calls[:-1])
    assert filler.calls[-1] == (sent, total - sent)
    assert writer.sending_message is filler
    filler.expired = True
    while (view := reader.read()) is None:
        assert not writer.try_write_filled(filler, total, filler, 3) or not writer.sending
    assert bytes(view) == filler.message and reader.frame_type == 3
    assert writer.sending_message is None
    assert writer.try_write(b"after") and drain(reader) == [b"after"]


def test_random_filled_and_plain_messages_keep_order_content_and_type():
    import random
    rng = random.Random(12)
    for capacity in (64, 256, 4096):
        _, writer, reader = make_ring(capacity=capacity)
        sent, received = [], []
        for number in range(600):
            size = rng.choice((0, 13, writer.max_frame_length, writer.max_frame_length + 1,
                               3 * capacity + 5, rng.randrange(10 * capacity)))
            message, frame_type = bytes([number % 251]) * size, rng.choice((1, 7))
            key = Filler([message])
            while not (writer.try_write_filled(key, size, key, frame_type) if number % 2
                       else writer.try_write(message, frame_type)):
                # Part way out: the ring took the rest. Else nothing was: fill again.
                key.expired = writer.sending_message is key
                while (view := reader.read()) is not None:
                    received.append((bytes(view), reader.frame_type))
                reader.release()
            sent.append((message, frame_type))
        while (view := reader.read()) is not None:
            received.append((bytes(view), reader.frame_type))
        assert received == sent, capacity


def test_a_fragment_out_of_place_is_refused():
    memory, writer, reader = make_ring(capacity=256)
    assert writer.try_write(b"x" * 100)
    struct.pack_into("<ii", memory, rd.HEADER_LENGTH, 108, rd.NEXT_FRAGMENT_TYPE)
    with pytest.raises(ValueError, match="out of place .outside a fragmented message"):
        reader.read()
