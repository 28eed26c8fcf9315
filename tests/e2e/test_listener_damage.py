"""A process that writes over a broker's listener damages only the connections it carried:
the broker rebuilds its listener and later producers connect and send (issue 20, item 9)."""
from __future__ import annotations

import os
import struct

import pytest

from cluster import KafkaConsumer, KafkaProducer
from cluster.metadata import data_dir as dd
from shm_ring import listener_descriptor as ld, ring_descriptor as rd
from shm_ring.naming import SharedRegion, listener_name
from tests.support.bounds import BOUND


@pytest.mark.multiprocess
def test_a_scribbled_accept_ring_is_rebuilt_by_its_broker_and_new_producers_connect(e2e):
    cluster = e2e.cluster(brokers=1)
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        producer.send("t", b"before").get(timeout=BOUND)
    region = SharedRegion.open(listener_name(cluster.namespace, 0))  # a rogue process
    struct.pack_into("<q", region.buf, ld.ACCEPT_RING_OFFSET + rd.CAPACITY_OFFSET,
                     41939771529891840)
    region.close()
    for number in range(3):
        with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers) as producer:
            producer.send("t", b"after %d" % number).get(timeout=BOUND)
    with KafkaConsumer("t", bootstrap_servers=cluster.bootstrap_servers,
                       auto_offset_reset="earliest", consumer_timeout_ms=2000) as consumer:
        values = [message.value for message in consumer]
    assert values == [b"before", b"after 0", b"after 1", b"after 2"]
    with open(os.path.join(dd.broker_dir(cluster.data_dir, 0), dd.BROKER_LOG)) as log:
        text = log.read()
    assert "listener: damaged accept ring header (magic" in text
    assert "capacity 41939771529891840); rebuilt it" in text
