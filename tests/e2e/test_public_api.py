"""The public API is importable from `cluster` under kafka-python's names, in any order."""
from __future__ import annotations

import subprocess
import sys

import pytest

import cluster

KAFKA_PYTHON_NAMES = ["KafkaProducer", "KafkaConsumer", "KafkaAdminClient", "NewTopic",
                      "NewPartitions", "TopicPartition", "OffsetAndMetadata",
                      "OffsetAndTimestamp", "ConsumerRecord", "RecordMetadata",
                      "ConsumerRebalanceListener"]


@pytest.mark.parametrize("name", KAFKA_PYTHON_NAMES + ["Cluster", "errors"])
def test_every_public_name_resolves(name):
    assert getattr(cluster, name) is not None
    assert name in cluster.__all__


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="'NoSuchThing'"):
        cluster.NoSuchThing


@pytest.mark.multiprocess
@pytest.mark.parametrize("first", ["consumer_proc.consumer", "consumer_proc.fetcher",
                                   "consumer_proc.coordinator",
                                   "cluster.producer.kafka_producer", "replica_proc.broker"])
def test_modules_import_in_a_fresh_interpreter_without_a_cycle(first):
    code = f"import {first}; from cluster import *; print(KafkaConsumer.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "KafkaConsumer"


def test_errors_carry_kafka_codes():
    assert cluster.errors.for_code(2) is cluster.errors.CorruptRecordError
    assert cluster.errors.NotLeaderForPartitionError.errno == 6
