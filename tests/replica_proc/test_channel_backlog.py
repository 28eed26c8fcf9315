"""The channel's copy paths (``Channel``): a muted channel's backlog holds views of the
request ring, not copies, so the ring must stay unreleased until every frame of the backlog
has been handled (the client cannot write over a frame the broker has yet to read); a Fetch
response longer than the response ring's largest frame goes as fragments filled straight
from the log, the rest taken when the ring is full, so it arrives whole even if the log's
files go away before it is all out."""
from __future__ import annotations

from cluster.protocol.fetch_response import FetchResponseFrame, PartitionData
from replica_proc import broker as broker_module
from replica_proc.broker import Broker
from replica_proc.channel import Channel
from segments.log import PartitionLog
from shm_ring import ring_descriptor as rd
from shm_ring.ring import Ring, format_ring
from tests.support.broker import batch

CAPACITY = 256
FRAME = 40  # payload bytes: four such frames fill the ring


class RingConnection:
    """The broker's side of a connection over a real Ring in local memory (what Channel
    uses of shm_ring.Connection); ``client`` is the writing end."""

    name = "ring"
    client_pid = 0

    def __init__(self):
        self.client, self._reader = _ring_pair()
        self._writer, self.responses = _ring_pair()
        self.max_response_frame = self._writer.max_frame_length

    def recv(self):
        return self._reader.read()

    def release(self):
        self._reader.release()

    def try_send(self, frame):
        return self._writer.try_write(frame)

    def try_send_filled(self, key, length, fill):
        return self._writer.try_write_filled(key, length, fill)

    @property
    def sending(self):
        return self._writer.sending_message


def _ring_pair():
    memory = bytearray(rd.ring_length(CAPACITY))
    format_ring(memory, CAPACITY)
    return Ring(memory, "writer"), Ring(memory, "reader")


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


def test_a_fetch_response_longer_than_a_frame_is_filled_from_the_log_and_arrives_whole(
        tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    for n in range(3):
        log.append(batch([b"value-%d-%d" % (n, i) for i in range(5)]))
    response = FetchResponseFrame(11, 7, [("t", [PartitionData(0, 0, 15, 15, 0,
                                                               log.read_slice(0, 1 << 20))])])
    expected = bytes(response.tobytes())
    conn = RingConnection()
    assert response.size > max(CAPACITY, conn.max_response_frame)
    channel = Channel(conn)
    channel.send_fetch(response)
    assert channel.unsent is response  # part way out: the ring holds the rest
    log.close()  # the slices are no longer readable: the rest was taken already
    received = None
    while received is None:
        received = conn.responses.read()
        conn.responses.release()
        if channel.unsent is not None:
            channel.retry_send()
    assert bytes(received) == expected and channel.unsent is None
