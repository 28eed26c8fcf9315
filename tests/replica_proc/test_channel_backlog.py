"""A muted channel's backlog holds views of the request ring, not copies (``Channel``): the
ring must then stay unreleased until every frame of the backlog has been handled, so the
client cannot write over a frame the broker has yet to read."""
from __future__ import annotations

from replica_proc import broker as broker_module
from replica_proc.broker import Broker
from replica_proc.channel import Channel
from shm_ring import ring_descriptor as rd
from shm_ring.ring import Ring, format_ring

CAPACITY = 256
FRAME = 40  # payload bytes: four such frames fill the ring


class RingConnection:
    """The broker's side of a connection over a real Ring in local memory (what Channel
    uses of shm_ring.Connection); ``client`` is the writing end."""

    name = "ring"
    max_response_frame = 1 << 20
    client_pid = 0

    def __init__(self):
        memory = bytearray(rd.ring_length(CAPACITY))
        format_ring(memory, CAPACITY)
        self.client = Ring(memory, "client")
        self._reader = Ring(memory, "broker")

    def recv(self):
        return self._reader.read()

    def release(self):
        self._reader.release()


class Recorder:
    def __init__(self):
        self.handled = []

    def handle(self, channel, frame):
        self.handled.append(bytes(frame))


def test_backlog_frames_are_read_intact_and_the_ring_is_released_only_after_them(
        monkeypatch):
    monkeypatch.setattr(broker_module, "REQUESTS_PER_TURN", 1)
    conn = RingConnection()
    channel = Channel(conn)
    frames = [bytes([65 + n]) * FRAME for n in range(4)]
    channel.parked = object()  # a delayed response waits: the channel is muted
    for frame in frames[:3]:
        assert conn.client.try_write(frame)
    channel.settle()
    assert len(channel.backlog) == 3 and channel.next_request() is None
    channel.parked = None
    recorder = Recorder()
    loop = Broker.__new__(Broker)
    for turn in range(3):
        assert channel.needs_service
        loop._serve(None, recorder, channel)
        assert recorder.handled == frames[:turn + 1]
        if turn < 2:  # frames of the backlog still unread: none of the ring is free
            assert not conn.client.try_write(b"x" * 100)  # room only once released
    assert not channel.backlog and not channel.needs_service
    assert conn.client.try_write(frames[3])  # all released
    loop._serve(None, recorder, channel)
    assert recorder.handled == frames
