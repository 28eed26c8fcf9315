"""``ringlog gateway``: serve a running cluster to any Kafka client over TCP.

::

    ringlog gateway --data-dir D --kafka-port P [--bind HOST] [--override key=value ...]

Broker ``b`` listens on ``P + b`` (``P`` 0: free ports); the bootstrap address is printed
once every listener is open (``127.0.0.1:P`` for a cluster whose lowest broker id is 0).
Runs until SIGTERM or Ctrl-C. ``--bind`` other than loopback is refused unless asked for,
with a warning: the Kafka protocol here is PLAINTEXT (no authentication, no encryption).
``--override`` takes the gateway's Kafka-named settings (``cluster.gateway.config``).
``ringlog cluster start --kafka-port P`` runs this under the supervisor (restarted if it
dies, stopped with the cluster). A failure is one line and exit 1.

``python -m cluster.tools.gateway_cmd ARGS`` is the same command without loading every other
tool of the CLI (what the supervisor and the tests start: seconds less).
"""
from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import sys

from cluster.config.properties import parse_overrides
from cluster.errors import InvalidConfigurationError, NoBrokersAvailable
from cluster.gateway.config import GatewayConfig
from cluster.gateway.server import LOOPBACK, Gateway
from cluster.tools.support import fail

log = logging.getLogger("cluster.gateway")


def add_arguments(parser):
    parser.add_argument("--data-dir", required=True, help="the running cluster's data directory")
    parser.add_argument("--kafka-port", type=int, required=True, metavar="P",
                        help="broker b listens on P + b; 0 picks free ports")
    parser.add_argument("--bind", default=LOOPBACK, metavar="HOST",
                        help=f"address to listen on (default {LOOPBACK}); any other is "
                             f"reachable by other hosts without authentication")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="socket.request.max.bytes, queued.max.requests, "
                             "connections.max.idle.ms, ringlog.ring.bytes")


def plaintext_warning(host):
    """The warning for a bind address that is not loopback, or None."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        return None
    return (f"gateway listening on {host}: the Kafka protocol here is PLAINTEXT (no "
            f"authentication, no encryption); anyone who reaches this address can read and "
            f"write every topic")


def run(args):
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not 0 <= args.kafka_port <= 65535:
        return fail(ValueError(f"--kafka-port {args.kafka_port} is not a TCP port (0-65535)"))
    warning = plaintext_warning(args.bind)
    if warning:
        log.warning(warning)
    try:
        config = GatewayConfig.from_overrides(parse_overrides(args.override))
        gateway = Gateway(os.path.abspath(args.data_dir), args.kafka_port, config, args.bind)
        gateway.start()
    except (InvalidConfigurationError, NoBrokersAvailable, OSError) as exc:
        return fail(exc)
    signal.signal(signal.SIGTERM, lambda *_: gateway.stop())
    signal.signal(signal.SIGINT, lambda *_: gateway.stop())
    ports = ", ".join(f"broker {b} {gateway.host}:{p}" for b, p in sorted(gateway.ports().items()))
    print(f"Kafka gateway of {gateway.data_dir}: bootstrap {gateway.bootstrap()} ({ports})",
          flush=True)
    try:
        while not gateway.serve_for(1.0):
            pass
    finally:
        gateway.stop()
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="ringlog gateway")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
