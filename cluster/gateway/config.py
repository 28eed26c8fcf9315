"""The gateway's settings, by Kafka's broker names for the same things.

- ``socket.request.max.bytes`` (default 104857600, Kafka's): the largest request frame a
  client may send; a larger size prefix closes the connection.
- ``queued.max.requests`` (default 500, Kafka's): requests of one connection waiting for
  their answers before the gateway stops reading that connection.
- ``connections.max.idle.ms`` (default 600000, Kafka's): a connection with no bytes either
  way and nothing in flight for this long is closed.
- ``socket.receive.buffer.bytes`` / ``socket.send.buffer.bytes`` (default 102400,
  Kafka's; -1: the OS default, which on Linux grows with the traffic): SO_RCVBUF /
  SO_SNDBUF of each client connection. With the OS's autotuning a client that never reads
  could park megabytes in the kernel's buffers before the gateway stops it.
- ``ringlog.ring.bytes`` (default 4 MiB, the broker's key): capacity of each ring of a
  connection to a broker; a request frame must fit half of it (a larger one closes the
  connection with a message saying so).

``GatewayConfig.from_overrides({"key": "value"})``: ConfigException-style errors
(InvalidConfigurationError naming the key and the bad value).
"""
from __future__ import annotations

import dataclasses

from cluster.errors import InvalidConfigurationError
from shm_ring import WaitPolicy

DEFAULTS = {
    "socket.request.max.bytes": 104857600,
    "queued.max.requests": 500,
    "connections.max.idle.ms": 600000,
    "socket.receive.buffer.bytes": 102400,
    "socket.send.buffer.bytes": 102400,
    "ringlog.ring.bytes": 4 * 1024 * 1024,
}

#: Keys where -1 means "the OS default" (Kafka's rule for the socket buffer sizes).
_OS_DEFAULT_ALLOWED = ("socket.receive.buffer.bytes", "socket.send.buffer.bytes")


@dataclasses.dataclass(frozen=True)
class GatewayConfig:
    socket_request_max_bytes: int = DEFAULTS["socket.request.max.bytes"]
    queued_max_requests: int = DEFAULTS["queued.max.requests"]
    connections_max_idle_ms: int = DEFAULTS["connections.max.idle.ms"]
    ring_bytes: int = DEFAULTS["ringlog.ring.bytes"]
    socket_receive_buffer_bytes: int = DEFAULTS["socket.receive.buffer.bytes"]
    socket_send_buffer_bytes: int = DEFAULTS["socket.send.buffer.bytes"]
    #: How a bridge waits on its rings: a short spin (hundreds of connections may wait at
    #: once on two cores), then a park whose wake-ups to check the broker's liveness (a
    #: /proc read each) come every half second: at the default 50 ms, a thousand parked
    #: connections cost the gateway more CPU than their requests (perf/README.md,
    #: "Gateway connections").
    wait_policy: WaitPolicy = WaitPolicy(spin=20, poll_interval=0.5)

    @classmethod
    def from_overrides(cls, overrides):
        values = dict(DEFAULTS)
        for key, raw in overrides.items():
            if key not in DEFAULTS:
                raise InvalidConfigurationError(
                    f"unknown gateway config {key!r}; known: {sorted(DEFAULTS)}")
            try:
                values[key] = int(raw)
            except (TypeError, ValueError):
                raise InvalidConfigurationError(
                    f"{key} must be an integer, found {raw!r}") from None
        for key, value in values.items():
            if key in _OS_DEFAULT_ALLOWED:
                if value < 1 and value != -1:
                    raise InvalidConfigurationError(
                        f"{key} must be at least 1, or -1 for the OS default, found {value}")
            elif value < 1:
                raise InvalidConfigurationError(f"{key} must be at least 1, found {value}")
        ring = values["ringlog.ring.bytes"]
        if ring & (ring - 1) or ring < 64 * 1024:
            raise InvalidConfigurationError(
                f"ringlog.ring.bytes must be a power of two of at least 65536, found {ring}")
        return cls(values["socket.request.max.bytes"], values["queued.max.requests"],
                   values["connections.max.idle.ms"], ring,
                   values["socket.receive.buffer.bytes"], values["socket.send.buffer.bytes"])
