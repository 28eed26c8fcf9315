"""ringlog through its Kafka wire gateway, driven by confluent-kafka (librdkafka) over
loopback TCP: the same cluster as the ``ringlog`` peer (``peers.ringlog.Deployment``) plus
``ringlog gateway --kafka-port 0``; labelled a Kafka client's view of ringlog, not Apache
Kafka. Workloads 1 and 2 (``workloads.RUNS``): beside the ``ringlog`` peer in the same run,
its ratio is the gateway's own cost for a Kafka client (a C client against ringlog's
Python client, so a ratio above 1 says the gateway is not the limit).

The clients are ``kafka_wire``'s (the same as the Kafka-compatible brokers' peers).

The gateway is one of the servers whose RSS is reported.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from perf.suite.peers import kafka_wire, ringlog

NAME = "ringlog_gateway"
DESCRIPTION = ("ringlog through its Kafka wire gateway on loopback TCP, confluent-kafka "
               "(librdkafka) clients; acks=1; produce()/consume()")
START_BOUND = 60.0


def missing(options):
    return kafka_wire.missing_client()


class Deployment(ringlog.Deployment):
    """The ``ringlog`` peer's cluster and a gateway process serving it."""

    def __init__(self, workdir, channels, brokers, replication=1):
        super().__init__(workdir, channels, brokers, replication)
        self.gateway = None
        try:
            self.gateway = subprocess.Popen(
                [sys.executable, "-m", "cluster.tools.gateway_cmd", "--data-dir",
                 self.data_dir, "--kafka-port", "0"], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            bootstrap = self._wait_serving()
        except BaseException:
            self.stop()
            raise
        self.endpoint = dict(self.endpoint, bootstrap=bootstrap)

    def _wait_serving(self):
        path = os.path.join(self.data_dir, "gateway.json")
        deadline = time.monotonic() + START_BOUND
        while time.monotonic() < deadline:
            try:
                with open(path) as file:
                    record = json.load(file)
                if record.get("pid") == self.gateway.pid and record.get("state") == "serving":
                    return record["bootstrap"]
            except (FileNotFoundError, json.JSONDecodeError):
                pass
            if self.gateway.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"the gateway of {self.data_dir} did not serve")

    def server_pids(self):
        gateway = [] if self.gateway is None else [self.gateway.pid]
        return super().server_pids() + gateway

    def stop(self):
        if self.gateway is not None and self.gateway.poll() is None:
            self.gateway.terminate()
            try:
                self.gateway.wait(30)
            except subprocess.TimeoutExpired:
                self.gateway.kill()
                self.gateway.wait()
        super().stop()


def deploy(workdir, channels, brokers, options):
    return Deployment(workdir, channels, brokers, options.get("replication", 1))


def produce(endpoint, task, gate):
    return kafka_wire.produce(endpoint, task, gate)


def consume(endpoint, task, gate):
    return kafka_wire.consume(endpoint, task, gate)
