"""A flipped byte in one copy of the metadata log of a stopped 3-broker cluster: the
cluster starts, serves every acknowledged record, and the copy is repaired, its damaged
bytes kept aside and named in the broker log (``replica_proc.controller.metadata_copies``).

The ``e2e`` fixture stops the cluster and fails the test if any process it started still
runs or any shared-memory object of its cluster is left."""
from __future__ import annotations

import glob
import os

import pytest

from cluster import KafkaAdminClient, KafkaProducer, NewTopic
from cluster.metadata import data_dir as dd
from replica_proc.controller.metadata_copies import COPY_DIR, DAMAGED_SUFFIX
from tests.e2e.helpers import consume_partitions, record_value
from tests.support.bounds import BOUND

pytestmark = pytest.mark.multiprocess

SEGMENT = "0" * 20 + ".log"
RECORDS = 60


def read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("damaged", ["log", "broker-1 copy"])
def test_a_flipped_byte_in_one_metadata_log_copy_is_repaired_at_the_start(e2e, damaged):
    cluster = e2e.cluster(brokers=3)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("kept", num_partitions=3, replication_factor=3)])
    cluster.wait_for_metadata(lambda image: "kept" in image.topics and all(
        len(p.isr) == 3 for p in image.topics["kept"].partitions))
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all",
                       max_block_ms=BOUND * 1000) as producer:
        for n in range(RECORDS):
            producer.send("kept", record_value(0, n), partition=n % 3)
        producer.flush(BOUND)
    cluster.stop()
    log_dir = os.path.join(cluster.data_dir, dd.METADATA_LOG_DIR)
    target = log_dir if damaged == "log" else os.path.join(cluster.data_dir, "broker-1",
                                                           COPY_DIR)
    intact = read(os.path.join(log_dir, SEGMENT))
    assert all(read(os.path.join(cluster.data_dir, f"broker-{b}", COPY_DIR, SEGMENT)) == intact
               for b in range(3))
    with open(os.path.join(target, SEGMENT), "r+b") as f:  # a record of the topic's batch
        f.seek(len(intact) // 2)
        byte = f.read(1)[0]
        f.seek(len(intact) // 2)
        f.write(bytes([byte ^ 0x08]))

    cluster.start()
    assert sorted(cluster.metadata().topics) == ["kept"]
    consumed = consume_partitions(cluster.bootstrap_servers, "kept", {p: RECORDS // 3
                                                                      for p in range(3)})
    assert sorted((producer, seq) for rows in consumed.values() for _, producer, seq in rows
                  ) == [(0, n) for n in range(RECORDS)]
    [aside] = glob.glob(f"{target}.*{DAMAGED_SUFFIX}")
    assert read(os.path.join(aside, SEGMENT)) != intact  # the damaged bytes, kept
    assert read(os.path.join(target, SEGMENT))[:len(intact)] == intact  # repaired
    logs = "".join(read(path).decode(errors="replace")
                   for path in glob.glob(os.path.join(cluster.data_dir, "broker-*",
                                                      "broker.log")))
    assert f"{target} is damaged" in logs and aside in logs
