"""A Kafka wire gateway process (``ringlog gateway``) for tests, and the 3-broker cluster
the real-client tests share.

``GatewayProcess(data_dir, *overrides)``: ``start()`` runs ``ringlog gateway --data-dir D
--kafka-port 0`` (``python -m cluster.tools.gateway_cmd``) with its log in a file and waits
(BOUND) until
``D/gateway.json`` names its pid as serving; ``bootstrap`` / ``ports`` / ``log()``;
``kill()`` SIGKILLs it by pid, ``stop()`` SIGTERMs it (SIGKILL after BOUND). Several
gateways may serve one cluster at once (each its own ports); the record is the newest's.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from cluster.metadata import data_dir as dd
from tests.support.bounds import BOUND


class GatewayProcess:
    def __init__(self, data_dir, *overrides, log_path=None):
        self.data_dir = os.fspath(data_dir)
        self.overrides = overrides
        self.log_path = log_path or os.path.join(self.data_dir, f"gateway-test-{id(self)}.log")
        self.popen = None
        self.record = None

    @property
    def bootstrap(self):
        return self.record["bootstrap"]

    @property
    def ports(self):
        return {int(b): p for b, p in self.record["ports"].items()}

    def start(self):
        argv = [sys.executable, "-m", "cluster.tools.gateway_cmd", "--data-dir",
                self.data_dir, "--kafka-port", "0"]
        for override in self.overrides:
            argv += ["--override", override]
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT)
        deadline = time.monotonic() + BOUND
        path = os.path.join(self.data_dir, dd.GATEWAY_JSON)
        while True:
            try:
                with open(path) as file:
                    record = json.load(file)
            except (FileNotFoundError, json.JSONDecodeError):
                record = {}
            if record.get("pid") == self.popen.pid and record.get("state") == "serving":
                self.record = record
                return self
            if self.popen.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"gateway did not serve; its log:\n{self.log()}")
            time.sleep(0.02)

    def log(self):
        with open(self.log_path, errors="replace") as file:
            return file.read()

    def kill(self):
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
        if self.popen is not None:
            self.popen.wait(BOUND)

    def stop(self):
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(BOUND)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(BOUND)
