"""``ringlog metrics``: the stats pages of a cluster as a Prometheus scrape target.

::

    ringlog metrics --data-dir D --prometheus-port P [--host 127.0.0.1]
    ringlog metrics --data-dir D --once

Serves the text exposition (prometheus-client) at ``http://127.0.0.1:P/metrics`` until
Ctrl-C or SIGTERM; every scrape reads the pages afresh (``exposition.PagesCollector``), so
what it shows is as fresh as the pages (each process republishes every second). Names and
labels: ``exposition``. ``--once`` prints one exposition to stdout and exits (scripts,
tests). Loopback only: ``--host`` accepts loopback addresses (127.0.0.0/8, ::1) alone.

Exit status 0; 1 with one line on stderr when D holds no cluster or the port cannot be
bound. Owner: the main thread; scrapes run in the HTTP server's thread.
"""
from __future__ import annotations

import ipaddress
import os
import sys
import threading

from cluster.errors import KafkaError
from cluster.tools.observe import pages
from cluster.tools.support import ToolError, fail, stop_on_sigterm


def add_arguments(parser):
    parser.add_argument("--data-dir", required=True, metavar="D",
                        help="the cluster's data directory")
    parser.add_argument("--prometheus-port", type=int, metavar="P",
                        help="serve /metrics on this port of the loopback interface")
    parser.add_argument("--host", default="127.0.0.1",
                        help="loopback address to bind (default 127.0.0.1)")
    parser.add_argument("--once", action="store_true",
                        help="print the exposition once to stdout and exit")


def run(args):
    try:
        data_dir = os.path.abspath(args.data_dir)
        cluster = pages.cluster_id(data_dir)
        registry = _registry(cluster)
        if args.once:
            from prometheus_client import generate_latest
            sys.stdout.write(generate_latest(registry).decode())
            return 0
        if args.prometheus_port is None:
            raise ToolError("--prometheus-port must be specified (or --once)")
        _check_loopback(args.host)
        with stop_on_sigterm():
            return _serve(registry, args.host, args.prometheus_port, cluster)
    except KeyboardInterrupt:
        return 0
    except (ToolError, OSError, ValueError, KafkaError) as exc:
        return fail(exc, "metrics: ")


def _registry(cluster):
    from prometheus_client import CollectorRegistry

    from cluster.tools.observe.exposition import PagesCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(PagesCollector(lambda: pages.read_pages(cluster)))
    return registry


def _check_loopback(host):
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ToolError(f"--host must be a loopback address (127.0.0.1, ::1): the stats "
                        f"stay on this host; found {host!r}")


def _serve(registry, host, port, cluster):
    from prometheus_client import start_http_server

    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ToolError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    shown = f"[{host}]" if ":" in host else host
    print(f"metrics: cluster {cluster} at http://{shown}:{server.server_port}/metrics "
          f"(Ctrl-C stops)", flush=True)
    try:
        threading.Event().wait()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    return 0
