"""``ringlog cluster start --kafka-port 0 --detach``: the gateway runs under the supervisor,
its addresses printed by ``start`` and ``status``; SIGKILLed, it is started again on the
same ports; ``cluster stop`` stops it. Every process is stopped by pid in ``finally``."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cluster.metadata import data_dir as dd
from cluster.protocol import frames
from cluster.protocol.frames import ApiKey
from cluster.supervisor.supervisor import read_record
from shm_ring.liveness import process_start_time
from shm_ring.naming import cleanup_stale, list_objects
from tests.support.bounds import BOUND
from tests.support.kafka_socket import call, connect

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


#: ``ringlog cluster`` without loading the CLI's other tools.
CLI = """
import argparse, sys
from cluster.tools import cluster_cmd
parser = argparse.ArgumentParser(prog="ringlog cluster")
cluster_cmd.add_arguments(parser)
sys.exit(cluster_cmd.run(parser.parse_args()))
"""


def cli(*args):
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True,
                          timeout=BOUND * 2)


def gateway_record(data_dir):
    with open(os.path.join(data_dir, dd.GATEWAY_JSON)) as file:
        return json.load(file)


def answers(port):
    with connect(port) as sock:
        response = call(sock, frames.request_class(ApiKey.API_VERSIONS, 2)())
    return response.error_code == 0


def test_cluster_start_runs_the_gateway_under_the_supervisor(tmp_path):
    data_dir = str(tmp_path / "data")
    pids = []
    try:
        started = cli("start", "--data-dir", data_dir, "--brokers", "1", "--detach",
                      "--kafka-port", "0")
        assert started.returncode == 0, started.stderr
        record = read_record(data_dir)
        pids += [record["supervisor_pid"], *record["pids"].values()]
        first = gateway_record(data_dir)
        pids.append(first["pid"])
        assert record["gateway_pid"] == first["pid"]
        line = f"kafka gateway: pid {first['pid']}, serving; bootstrap.servers " \
               f"{first['bootstrap']}"
        assert line in started.stdout
        assert line in cli("status", "--data-dir", data_dir).stdout
        assert answers(first["ports"]["0"])

        os.kill(first["pid"], signal.SIGKILL)
        deadline = time.monotonic() + BOUND
        while True:
            again = gateway_record(data_dir)
            if again["pid"] != first["pid"] and again["state"] == "serving":
                break
            assert time.monotonic() < deadline, "the supervisor did not restart the gateway"
            time.sleep(0.05)
        pids.append(again["pid"])
        assert again["ports"] == first["ports"]  # clients reconnect where they were
        assert answers(again["ports"]["0"])

        cluster_id = dd.read_cluster_id(data_dir)
        assert cli("stop", "--data-dir", data_dir).returncode == 0
        assert process_start_time(again["pid"]) is None
        assert list_objects(cluster_id) == []
    finally:
        for pid in pids:
            if process_start_time(pid) is not None:
                os.kill(pid, signal.SIGKILL)
        cluster_id = dd.read_cluster_id(data_dir)
        if cluster_id is not None:
            cleanup_stale(cluster_id)
