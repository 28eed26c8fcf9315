"""A stand-in broker for the supervisor and controller tests (run as a script).

It does what the real broker (``python -m replica_proc``) does for the control plane and
nothing else: holds its broker lock, writes broker.json (starting, then serving), runs a
Controller from its loop, and on SIGTERM writes stopping, resigns and exits 0.
``--exit-code N`` makes it exit with N right after registering (a broker that fails to
start); ``--never-serve`` keeps it in ``starting``; ``--create-topic NAME:PARTITIONS`` has it
create that topic when it is the controller and the topic does not exist;
``--ignore-sigterm`` makes it a broker that does not stop on SIGTERM (only SIGKILL ends it).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time

# The repository root (three levels above this folder), where the packages are.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))

from cluster.config import BrokerConfig, parse_overrides
from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import register_broker
from cluster.metadata.page import MetadataPage
from replica_proc.controller.controller import Controller


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--broker-id", type=int, required=True)
    parser.add_argument("--override", action="append", default=[])
    parser.add_argument("--exit-code", type=int)
    parser.add_argument("--never-serve", action="store_true")
    parser.add_argument("--create-topic")
    parser.add_argument("--ignore-sigterm", action="store_true")
    args = parser.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: None if args.ignore_sigterm else stop.append(1))
    props = parse_overrides(args.override)
    props["broker.id"] = args.broker_id
    config = BrokerConfig(props, data_dir=args.data_dir)
    cluster_id = dd.read_cluster_id(args.data_dir)
    registration = register_broker(args.data_dir, args.broker_id, cluster_id)
    print(f"fake broker {args.broker_id} registered, pid {os.getpid()}", flush=True)
    if args.exit_code is not None:
        print("failing on purpose", flush=True)
        return args.exit_code
    page = MetadataPage.open(dd.read_shm_namespace(args.data_dir, cluster_id))
    controller = Controller(args.data_dir, cluster_id, args.broker_id, config, page,
                            poll_interval=0.01)
    if not args.never_serve:
        registration.set_state(dd.STATE_SERVING)
    while not stop:
        if controller.poll(time.monotonic()) and args.create_topic:
            name, partitions = args.create_topic.split(":")
            if name not in controller.image.topics:
                print(controller.create_topics([{"name": name,
                                                 "num_partitions": int(partitions)}]),
                      flush=True)
        time.sleep(0.005)
    registration.set_state(dd.STATE_STOPPING)
    controller.close()
    page.close()
    registration.close()
    print(f"fake broker {args.broker_id} stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
