"""``python -m replica_proc --data-dir D --broker-id N [--config F] [--override k=v ...]``

Runs one broker of the cluster in data directory D until SIGTERM or SIGINT (graceful
stop, exit status 0). ``--config`` is a server.properties file; ``--override`` pairs win
over it, as with ``kafka-server-start.sh``. The supervisor (``cluster.supervisor.supervisor``)
starts brokers this way, after it created the metadata page; a start that fails (the broker id
already running, the page missing, a bad config) logs why and exits with status 1. So does a
damaged or foreign data directory (a meta.properties that does not parse or names another
cluster or broker): one ERROR line naming the file and what was wrong, no traceback.

``RINGLOG_READY_FD`` (the supervisor's): a descriptor the broker writes one byte to and closes
once the metadata page lists it alive under a controller. The broker logs its start-up's
phases, wall and CPU time (``startup_timing``), when it serves.

The process runs with umask 077 (``dd.set_private_umask``), set before anything is opened:
every directory and file it makes in D (segments, indexes, checkpoints, the controller's
lock and metadata log) is 0700 / 0600, whoever started it.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time

from cluster.config import BrokerConfig, parse_overrides
from cluster.errors import InconsistentClusterIdError, KafkaStorageError
from cluster.metadata import data_dir as dd
from cluster.metadata.page import MetadataPage
from replica_proc.broker import Broker
from replica_proc.controller.controller import Controller
from replica_proc.startup_timing import StartupTiming
from shm_ring.naming import SquattedNameError

log = logging.getLogger("replica_proc")

READY_FD_ENV = "RINGLOG_READY_FD"
"""A descriptor the broker writes one byte to, then closes, once the metadata page lists it
alive under a controller (set by the supervisor, which waits on the other end)."""

PAGE_WAIT = 10.0
"""Seconds to wait for the supervisor's metadata page to appear."""


def open_page(namespace, timeout=PAGE_WAIT):
    """The cluster's metadata page (in its shared-memory ``namespace``), waiting up to
    ``timeout`` seconds for it to exist."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return MetadataPage.open(namespace)
        except FileNotFoundError:
            if time.monotonic() >= deadline:
                raise FileNotFoundError(
                    f"the metadata page of cluster {namespace} does not exist after "
                    f"{timeout} s; brokers are started by the supervisor (`ringlog cluster "
                    f"start`), which creates it") from None
            time.sleep(0.05)


def ready_fd():
    """The pipe the supervisor waits on (``RINGLOG_READY_FD``), or None."""
    value = os.environ.pop(READY_FD_ENV, None)
    try:
        return None if value is None else int(value)
    except ValueError:
        log.warning("ignoring %s=%r: not a file descriptor", READY_FD_ENV, value)
        return None


def build_config(args):
    """The BrokerConfig of the command line: --config, then --override, then --broker-id."""
    overrides = args.override + [f"broker.id={args.broker_id}"]
    if args.config:
        return BrokerConfig.load(args.config, overrides, data_dir=args.data_dir)
    return BrokerConfig(parse_overrides(overrides), data_dir=args.data_dir)


def main(argv=None):
    timing = StartupTiming()
    timing.mark("process")
    dd.set_private_umask()
    parser = argparse.ArgumentParser(prog="python -m replica_proc",
                                     description="Run one ringlog broker.")
    parser.add_argument("--data-dir", required=True, help="the cluster's data directory")
    parser.add_argument("--broker-id", type=int, required=True)
    parser.add_argument("--config", help="a server.properties file")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker config, winning over --config (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format=f"%(asctime)s broker-{args.broker_id} %(levelname)s %(name)s: %(message)s")
    try:
        config = build_config(args)
        timing.mark("config")

        def make_controller(cluster_id, page):
            return Controller(config.data_dir, cluster_id, config["broker.id"], config, page)

        broker = Broker(config, open_metadata=open_page, make_controller=make_controller,
                        startup=timing, ready_fd=ready_fd())
    except Exception as exc:
        log.error("cannot start broker %d: %s", args.broker_id, exc)
        return 1

    def request_stop(signum, frame):
        log.info("received %s: stopping", signal.Signals(signum).name)
        broker.stop()
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        broker.run()
    except (KafkaStorageError, InconsistentClusterIdError, SquattedNameError) as exc:
        # the message names the file, or the object another user made
        log.error("broker %d cannot run: %s", args.broker_id, exc)
        return 1
    except Exception:
        log.exception("broker %d failed", args.broker_id)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
