"""The broker's loop serves a bounded number of one connection's requests per turn, so a
client that keeps its request ring full cannot keep the others waiting."""
from __future__ import annotations

from replica_proc.broker import REQUESTS_PER_TURN, Broker
from replica_proc.channel import Channel


class RingStub:
    """The broker side of a connection: request frames to read, releases counted."""

    def __init__(self, name, frames):
        self.name = name
        self.max_response_frame = 1 << 20
        self.client_pid = 0
        self.frames = list(frames)
        self.released = 0

    def recv(self):
        return self.frames.pop(0) if self.frames else None

    def release(self):
        self.released += 1


class HandlerStub:
    def __init__(self):
        self.handled = []

    def handle(self, channel, frame):
        self.handled.append((channel.name, frame))


def test_a_turn_handles_at_most_requests_per_turn_of_one_connection():
    busy = Channel(RingStub("busy", [b"p%d" % n for n in range(3 * REQUESTS_PER_TURN)]))
    handler = HandlerStub()
    broker = Broker.__new__(Broker)
    broker._serve(None, handler, busy)
    assert [frame for _, frame in handler.handled] == [
        b"p%d" % n for n in range(REQUESTS_PER_TURN)]
    assert len(busy.conn.frames) == 2 * REQUESTS_PER_TURN  # left in the ring for later turns
    assert busy.conn.released == 1  # what was handled is freed; the client may write more


def test_the_next_turns_take_the_rest_in_order_and_other_connections_in_between():
    busy = Channel(RingStub("busy", [b"p%d" % n for n in range(2 * REQUESTS_PER_TURN + 1)]))
    quiet = Channel(RingStub("quiet", [b"fetch"]))
    handler = HandlerStub()
    broker = Broker.__new__(Broker)
    for _ in range(3):  # three turns of the loop, each serving both connections
        broker._serve(None, handler, busy)
        broker._serve(None, handler, quiet)
    assert [frame for name, frame in handler.handled if name == "busy"] == [
        b"p%d" % n for n in range(2 * REQUESTS_PER_TURN + 1)]
    assert handler.handled.index(("quiet", b"fetch")) == REQUESTS_PER_TURN
    assert busy.conn.frames == [] and quiet.conn.frames == []
