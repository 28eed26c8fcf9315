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


class CountingStub(RingStub):
    def __init__(self, name, frames):
        super().__init__(name, frames)
        self.looks = 0

    def recv(self):
        self.looks += 1
        return super().recv()


class LoopHandlerStub(HandlerStub):
    def __init__(self):
        super().__init__()
        self.cancelled = []

    def cancel(self, channel):
        self.cancelled.append(channel.name)


class ListenerStub:
    def __init__(self):
        self.dropped = []

    def drop(self, conn):
        self.dropped.append(conn.name)


def test_a_turn_looks_only_at_the_channels_needing_service():
    """Channels put themselves in the loop's service set when they need a look without a
    request of their own (unparked with a backlog, closing); a turn serves those and no
    other, and a channel leaves the set once it needs nothing."""
    service = set()
    channels = [Channel(CountingStub(f"c{n}", []), service) for n in range(50)]
    parked = channels[7]
    parked.parked = object()  # muted: what arrives goes to the backlog
    parked.conn.frames = [b"f1", b"f2"]
    parked.settle()
    assert len(parked.backlog) == 2 and service == set()
    parked.parked = None  # answered, e.g. by another connection's produce
    closing = channels[30]
    closing.closing = "garbage"
    assert service == {parked, closing}
    for channel in channels:
        channel.conn.looks = 0
    broker = Broker.__new__(Broker)
    broker._channels = {channel.conn: channel for channel in channels}
    handler, listener = LoopHandlerStub(), ListenerStub()
    broker._service_turn(listener, handler, service)
    assert handler.handled == [("c7", b"f1"), ("c7", b"f2")]
    assert listener.dropped == ["c30"] and handler.cancelled == ["c30"]
    assert service == set() and parked.conn.released == 1
    assert [c.name for c in channels if c.conn.looks] == ["c7"]  # no other ring read
