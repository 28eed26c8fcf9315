"""A raw Kafka protocol client on a TCP socket, for the gateway's tests: frames written
with ``cluster.protocol.frames`` (or by hand, for what ringlog does not encode) and
answers read whole."""
from __future__ import annotations

import socket
import struct

from cluster.protocol import frames
from tests.support.bounds import BOUND


def connect(port, host="127.0.0.1"):
    sock = socket.create_connection((host, port), timeout=BOUND)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_frame(sock):
    """One whole response frame (size prefix included), or b"" once the peer closed."""
    prefix = _read_exactly(sock, 4)
    if len(prefix) < 4:
        return b""
    (size,) = struct.unpack(">i", prefix)
    body = _read_exactly(sock, size)
    return prefix + body if len(body) == size else b""


def _read_exactly(sock, count):
    chunks, got = [], 0
    while got < count:
        chunk = sock.recv(count - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def call(sock, request, correlation_id=1, client_id="raw-test"):
    """Send a kio request and decode the answer (frames' codec)."""
    sock.sendall(frames.encode_request(request, correlation_id, client_id))
    frame = read_frame(sock)
    assert frame, "the gateway closed the connection"
    answered, response = frames.decode_response(frame, request.__api_key__,
                                                request.__version__)
    assert answered == correlation_id
    return response


def closed_by_peer(sock):
    """Whether the peer closed the connection (reads until EOF, within BOUND)."""
    try:
        while True:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
