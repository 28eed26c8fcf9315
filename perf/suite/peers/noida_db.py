"""noida-db's Kafka service (PyPI ``noida-db``: one binary serving several databases'
wire protocols; only its Kafka service is started here), single node, data in memory and
saved under the case's directory. Kafka-compatible, not Apache Kafka. Driven by
confluent-kafka over loopback TCP (``kafka_wire``), workloads 1 and 2; the binary is the
server whose RSS is reported.
"""
from __future__ import annotations

import importlib.resources
import os
import tempfile

from perf.suite.peers import kafka_wire

NAME = "noida_db"
DESCRIPTION = ("noida-db's Kafka service (Kafka-compatible, not Apache Kafka) on loopback "
               "TCP, confluent-kafka clients; acks=1; produce()/consume()")


def _binary():
    return importlib.resources.files("noida_db").joinpath("noida-db")


def missing(options):
    return kafka_wire.missing_binary(_binary, "noida-db")


def deploy(workdir, channels, brokers, options):
    home = tempfile.mkdtemp(prefix="noida-", dir=workdir)
    port = kafka_wire.free_port()
    argv = [str(_binary()), "start", "--data-dir", os.path.join(home, "data"),
            "--host", kafka_wire.LOOPBACK, "--only", "kafka", "--kafka-port", str(port)]
    return kafka_wire.Broker(argv, home, port, channels)


def produce(endpoint, task, gate):
    return kafka_wire.produce(endpoint, task, gate)


def consume(endpoint, task, gate):
    return kafka_wire.consume(endpoint, task, gate)
