"""Broker processes: graceful stop, SIGKILL and recovery, one process per broker id, the
controller inside the broker (admin requests, auto-creation, forwarding), log timers."""
from __future__ import annotations

import os
import re

import pytest
from kio.schema.errors import ErrorCode

from cluster.metadata import data_dir as dd
from cluster.metadata.page import MetadataPage
from segments.log import CLEAN_SHUTDOWN_MARKER
from segments.records import iter_records
from shm_ring import PeerClosedError, PeerDiedError, cleanup_stale, list_objects
from tests.support.bounds import BOUND
from tests.support.broker import (
    BrokerProcess,
    Client,
    batch,
    create_partitions_request,
    create_topics_request,
    delete_topics_request,
    fetch_request,
    list_offsets_request,
    make_image,
    metadata_request,
    produce_request,
    wait_for,
)

# Every test runs broker processes.
pytestmark = pytest.mark.multiprocess


@pytest.fixture
def cluster(tmp_path):
    """A data directory with a cluster id and a metadata page; brokers started through it
    are killed and every shared-memory object swept at the end."""
    class Cluster:
        data_dir = tmp_path
        cluster_id = dd.ensure_cluster_id(tmp_path)
        page = MetadataPage.create(cluster_id)
        brokers = []
        clients = []

        def broker(self, broker_id=0, **kwargs):
            broker = BrokerProcess(self.data_dir, broker_id, **kwargs)
            self.brokers.append(broker)
            return broker

        def client(self, broker_id=0):
            client = Client(self.cluster_id, broker_id)
            self.clients.append(client)
            return client

    made = Cluster()
    try:
        yield made
    finally:
        for client in made.clients:
            client.close()
        for broker in made.brokers:
            broker.kill()
        made.page.unlink()
        made.page.close()
        cleanup_stale(made.cluster_id)


def fetch_all(client, topic, partition=0, start=0):
    """Every record of the partition, fetched from offset ``start`` on."""
    values, offset = [], start
    while True:
        response = client.call(fetch_request([(topic, partition, offset)]))
        data = response.responses[0].partitions[0]
        assert data.error_code == ErrorCode.none, data
        records = list(iter_records(data.records))
        if not records:
            return values
        values += [(r.offset, r.value) for r in records if r.offset >= offset]
        offset = records[-1].offset + 1


def test_sigterm_stops_gracefully_and_leaves_clean_logs(cluster):
    cluster.page.publish(make_image(cluster.cluster_id, 1, {"t": (2, {})}))
    broker = cluster.broker().start()
    client = cluster.client()
    client.call(produce_request("t", 1, batch([b"kept"])))
    assert broker.stop() == 0, broker.log()
    assert dd.read_broker_state(cluster.data_dir, 0)["state"] == "stopping"
    for partition in (0, 1):
        path = os.path.join(cluster.data_dir, "broker-0", f"t-{partition}")
        assert os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_MARKER))
    with pytest.raises(PeerClosedError):
        client.call(produce_request("t", 1, batch([b"lost"])))
    assert list_objects(cluster.cluster_id) == [cluster.page.name]
    assert "broker 0 stopped" in broker.log()


def test_sigkill_then_restart_keeps_every_acknowledged_record(cluster):
    cluster.page.publish(make_image(cluster.cluster_id, 1, {"durable": (1, {
        "segment.bytes": "20000"})}))
    broker = cluster.broker().start()
    client = cluster.client()
    expected = []
    for n in range(40):
        values = [b"record-%d-%d" % (n, i) for i in range(30)]
        response = client.call(produce_request("durable", 0, batch(values)))
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
        expected += values
    broker.kill()
    with pytest.raises(PeerDiedError):
        client.call(produce_request("durable", 0, batch([b"after the crash"])))
    cluster.clients.remove(client)
    path = os.path.join(cluster.data_dir, "broker-0", "durable-0")
    assert not os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_MARKER))

    broker = cluster.broker().start()  # takes the dead broker's listener over
    client = cluster.client()
    assert fetch_all(client, "durable") == list(enumerate(expected))
    response = client.call(produce_request("durable", 0, batch([b"and more"])))
    assert response.responses[0].partition_responses[0].base_offset == len(expected)
    assert broker.stop() == 0


def test_a_second_process_with_the_same_broker_id_is_refused(cluster):
    first = cluster.broker().start()
    second = cluster.broker().start(wait=False)
    assert second.popen.wait(BOUND) == 1
    assert "already running" in second.log()
    client = cluster.client()  # the first one still serves
    assert client.call(metadata_request(None)).cluster_id == cluster.cluster_id
    assert first.stop() == 0


@pytest.mark.parametrize("where,damage,words", [
    ("", lambda t: t.replace(b"version=1", b"version=\xb1"), "byte 0xb1 at position"),
    ("broker-0", lambda t: t.replace(b"broker.id=0", b"broker.id=0\x00"), "line 2"),
    ("broker-0", lambda t: t.replace(b"cluster.id", b"cluster.ix"), "'cluster.ix="),
    ("broker-0", lambda t: t.replace(b"broker.id=0", b"broker.id=8"),
     "says cluster.id=.* broker.id='8', expected"),
])
def test_a_damaged_meta_properties_stops_the_start_with_one_line_naming_it(
        cluster, where, damage, words):
    broker = cluster.broker(controller=True).start()
    assert broker.stop() == 0
    path = os.path.join(cluster.data_dir, where, "meta.properties")
    with open(path, "rb") as f:
        text = f.read()
    with open(path, "wb") as f:
        f.write(damage(text))
    started = cluster.broker(controller=True).start(wait=False)
    assert started.popen.wait(BOUND) == 1
    output = started.log().split("broker 0 stopped")[-1]  # this start's lines only
    assert "Traceback" not in output and "UnicodeDecodeError" not in output
    [line] = [x for x in output.splitlines() if " ERROR " in x]
    assert "broker 0 cannot run: " in line and path in line
    assert re.search(words, line), line


def test_retention_runs_on_its_timer_in_the_broker_loop(cluster, tmp_path):
    # one batch per segment, every record older than retention.ms: each pass deletes every
    # segment but the active one, which holds the last batch
    cluster.page.publish(make_image(cluster.cluster_id, 1, {"short-lived": (1, {
        "segment.bytes": "1000", "retention.ms": "3600000"})}))
    properties = tmp_path / "server.properties"  # says an hour; --override wins
    properties.write_text("log.retention.check.interval.ms = 3600000\nnum.partitions=4\n")
    cluster.broker(config=properties,
                   overrides=["log.retention.check.interval.ms=20"]).start()
    client = cluster.client()
    for _n in range(10):
        client.call(produce_request("short-lived", 0, batch([b"x" * 900])))

    def log_start():
        response = client.call(list_offsets_request("short-lived", 0, -2))
        return response.topics[0].partitions[0].offset
    wait_for(lambda: log_start() == 9, "retention to delete every sealed segment")
    response = client.call(fetch_request([("short-lived", 0, 0)]))
    assert response.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
    assert [offset for offset, _ in fetch_all(client, "short-lived", start=9)] == [9]


# -- with the controller inside the broker (python -m replica_proc) --------------------------

def controller_and_brokers(client):
    response = client.call(metadata_request(None))
    return response.controller_id, [b.node_id for b in response.brokers]


def test_admin_requests_through_the_broker_that_is_the_controller(cluster):
    broker = cluster.broker(controller=True).start()
    client = cluster.client()
    wait_for(lambda: controller_and_brokers(client) == (0, [0]),
             "broker 0 to become the controller and be alive")
    response = client.call(create_topics_request({"orders": (2, {"retention.ms": "60000"}),
                                                  "bad name": (1, {})}))
    codes = {t.name: t.error_code for t in response.topics}
    assert codes == {"orders": ErrorCode.none, "bad name": ErrorCode.invalid_topic_exception}
    # the broker picked up its own new partitions before answering
    response = client.call(produce_request("orders", 1, batch([b"first order"])))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none

    response = client.call(create_partitions_request("orders", 3))
    assert response.results[0].error_code == ErrorCode.none
    response = client.call(produce_request("orders", 2, batch([b"new partition"])))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none

    response = client.call(delete_topics_request(["orders"]))
    assert response.responses[0].error_code == ErrorCode.none
    assert not os.path.exists(os.path.join(cluster.data_dir, "broker-0", "orders-0"))
    response = client.call(metadata_request(["orders"], allow_auto_topic_creation=False))
    assert response.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    assert broker.stop() == 0


def test_auto_creation_is_forwarded_to_the_controller_broker(cluster):
    cluster.broker(0, controller=True).start()
    controller_client = cluster.client(0)
    wait_for(lambda: controller_and_brokers(controller_client) == (0, [0]),
             "broker 0 to become the controller and be alive")
    cluster.broker(1, controller=True).start()
    client = cluster.client(1)
    wait_for(lambda: controller_and_brokers(client) == (0, [0, 1]),
             "broker 1 to be alive in the metadata")

    response = client.call(create_topics_request({"direct": (1, {})}))
    assert response.topics[0].error_code == ErrorCode.not_controller
    assert "controller is broker 0" in response.topics[0].error_message

    response = client.call(metadata_request(["auto-made"]))
    assert response.topics[0].error_code == ErrorCode.leader_not_available

    def created():
        topic = client.call(metadata_request(["auto-made"])).topics[0]
        return topic.error_code == ErrorCode.none and len(topic.partitions) == 1
    wait_for(created, "the controller to create the forwarded topic")
