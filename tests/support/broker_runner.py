"""Runs one real broker (replica_proc.broker.Broker) without a controller (run as a script by
tests/support/broker.py).

The broker tests publish the metadata images themselves on the cluster's metadata page, so
the broker must not run a controller that would publish its own: everything else is what
``python -m replica_proc`` runs (same config handling, same signals).
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

# The repository root (two levels above this folder), where the packages are.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from replica_proc.__main__ import build_config, open_page
from replica_proc.broker import Broker


def run():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--broker-id", type=int, required=True)
    parser.add_argument("--config")
    parser.add_argument("--override", action="append", default=[])
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s test-broker %(levelname)s %(name)s: %(message)s")
    broker = Broker(build_config(args), open_metadata=open_page, make_controller=None,
                    liveness_interval=0.05)
    signal.signal(signal.SIGTERM, lambda *_: broker.stop())
    broker.run()
    return 0


if __name__ == "__main__":
    sys.exit(run())
