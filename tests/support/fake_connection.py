"""``FakeConnection``: an outbound shm_ring connection to another broker, played in the
test process (no rings): ``send`` hands each decoded request to ``answer_to``, whose
answer frames ``recv`` returns in order; ``died`` makes ``check`` (and ``send``) raise
PeerDiedError, as a connection whose broker is gone does; ``closed`` records ``close``.
The broker-to-broker channel's tests and those of its users (the marker sender) use it."""
from __future__ import annotations

from cluster.protocol import frames as protocol
from shm_ring import PeerDiedError


class FakeConnection:
    """Answers each request with ``answer_to(request)`` (a kio response, or None for no
    answer yet); ``answer(correlation_id, response)`` queues one by hand."""

    name = "fake-connection"

    def __init__(self, answer_to=lambda request: None):
        self.answer_to = answer_to
        self.requests = []  # (correlation id, request)
        self.answers = []  # encoded response frames, oldest first
        self.died = False
        self.closed = False

    def check(self):
        if self.died:
            raise PeerDiedError("the other broker died")

    def send(self, frame, timeout=None):
        self.check()
        header, request = protocol.decode_request(frame)
        self.requests.append((header.correlation_id, request))
        response = self.answer_to(request)
        if response is not None:
            self.answer(header.correlation_id, response)
        return True

    def answer(self, correlation_id, response):
        self.answers.append(protocol.encode_response(response, correlation_id))

    def recv(self, timeout=None):
        return self.answers.pop(0) if self.answers else None

    def release(self):
        pass

    def close(self):
        self.closed = True
