"""Broker processes: graceful stop, SIGKILL and recovery, one process per broker id, the
controller inside the broker (admin requests, auto-creation, forwarding), log timers."""
from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
import time

import psutil
import pytest
from kio.schema.errors import ErrorCode

from cluster.metadata import data_dir as dd
from cluster.metadata.page import MetadataPage
from cluster.protocol.frames import SUPPORTED_VERSIONS, ApiKey
from replica_proc.alter_partition_manager import AlterPartitionManager
from replica_proc.broker_metadata import BrokerMetadata
from replica_proc.controller_channel import ControllerChannel
from replica_proc.high_watermark_checkpoint import HighWatermarkCheckpoint
from segments.leader_epoch import LeaderEpochFileCache
from segments.log import CLEAN_SHUTDOWN_MARKER
from segments.record.records import iter_records
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
)
from tests.support.waits import wait_for

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


def test_high_watermarks_and_leader_epochs_are_checkpointed(cluster):
    cluster.page.publish(make_image(cluster.cluster_id, 1, {"hw": (2, {})}))
    broker = cluster.broker(
        overrides=["replica.high.watermark.checkpoint.interval.ms=50"]).start()
    client = cluster.client()
    client.call(produce_request("hw", 1, batch([b"a", b"b", b"c"])))
    checkpoint = HighWatermarkCheckpoint(os.path.join(cluster.data_dir, "broker-0"))
    wait_for(lambda: checkpoint.read() == {("hw", 0): 0, ("hw", 1): 3},
             "the timer to checkpoint the high watermarks")
    client.call(produce_request("hw", 0, batch([b"d"])))
    assert broker.stop() == 0, broker.log()
    assert checkpoint.read() == {("hw", 0): 1, ("hw", 1): 3}  # written at the clean stop
    for partition in (0, 1):
        cache = LeaderEpochFileCache(os.path.join(cluster.data_dir, "broker-0",
                                                  f"hw-{partition}"))
        assert cache.load() and cache.entries() == [(0, 0)]


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


@pytest.fixture
def tmpfs():
    """``mount(path, size)``: a tmpfs of ``size`` bytes on ``path``, or the test is skipped
    where this machine does not allow mounting (not root). Unmounted at the end, after the
    brokers are gone: list this fixture before ``cluster``."""
    mounted = []

    def mount(path, size):
        os.makedirs(path, exist_ok=True)
        if shutil.which("mount") is None:
            pytest.skip("no mount command: cannot make a small file system to fill")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
                              capture_output=True, text=True, timeout=BOUND)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs to fill (needs root): {done.stderr.strip()}")
        mounted.append(path)
    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", path], check=True, timeout=BOUND)


def fill(directory):
    """Write a file in ``directory`` until its file system is full; its path."""
    path = os.path.join(directory, "filler")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)
    return path


def test_a_full_disk_fails_that_partition_with_kafka_storage_error_until_space_returns(
        tmpfs, cluster):
    full = os.path.join(cluster.data_dir, "broker-0", "full-0")
    tmpfs(full, 1 << 20)  # the partition "full-0" alone lives on a 1 MiB file system
    cluster.page.publish(make_image(cluster.cluster_id, 1, {
        "full": (1, {"segment.bytes": "65536"}), "roomy": (1, {})}))
    broker = cluster.broker().start()
    client = cluster.client()
    acked = []

    def produce(topic, tag):
        values = [b"%s-%d-%d-" % (topic.encode(), tag, i) + b"x" * 1000 for i in range(16)]
        result = client.call(produce_request(topic, 0, batch(values))).responses[0] \
            .partition_responses[0]
        if result.error_code == ErrorCode.none and topic == "full":
            acked.extend(values)
        return result

    for tag in range(8):  # 128 KiB over two segments
        assert produce("full", tag).error_code == ErrorCode.none
    filler = fill(full)
    for tag in range(8, 12):  # each needs new pages: none is left
        result = produce("full", tag)
        assert result.error_code == ErrorCode.kafka_storage_error, result
        assert "ENOSPC" in result.error_message and full in result.error_message
        assert produce("roomy", tag).error_code == ErrorCode.none  # the broker goes on
    assert broker.popen.poll() is None

    os.unlink(filler)  # space returns: no restart needed
    for tag in range(12, 20):  # rolls again, too
        assert produce("full", tag).error_code == ErrorCode.none
    assert fetch_all(client, "full") == list(enumerate(acked))
    assert len(acked) == 16 * 16
    assert "Traceback" not in broker.log()
    assert broker.stop() == 0


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


def test_alter_partition_reaches_the_controller_broker_over_the_rings(cluster):
    """A leader's ISR change sent over a ring connection to the controller broker (the
    test process plays the leader, broker 0 is the controller): answered with the state,
    or with the error of a stale partition epoch."""
    cluster.broker(0, controller=True).start()
    client = cluster.client(0)
    wait_for(lambda: controller_and_brokers(client) == (0, [0]),
             "broker 0 to become the controller and be alive")
    assert client.call(create_topics_request({"isr": (1, {})})).topics[0].error_code == 0
    channel = ControllerChannel(cluster.cluster_id, broker_id=7)
    try:
        metadata = BrokerMetadata(cluster.page, cluster.cluster_id)
        wait_for(lambda: metadata.refresh() is not None and metadata.image.partition(
            "isr", 0) is not None, "the topic in the metadata")
        state = metadata.image.partition("isr", 0)
        manager = AlterPartitionManager(0, metadata, None, channel, list, time.monotonic)
        answers = []

        def answered():
            channel.poll()
            manager.poll()
            return not manager.busy
        for partition_epoch in (state.partition_epoch, state.partition_epoch - 1):
            manager.submit("isr", 0, state.leader_epoch, partition_epoch, state.isr,
                           lambda code, new: answers.append((code, new)))
            wait_for(answered, "the controller's answer")
        assert answers == [(0, state), (ErrorCode.invalid_update_version, None)]
    finally:
        channel.close()


# -- many partitions -------------------------------------------------------------------------

MANY = 400
SPREAD = range(0, MANY, 8)  # 50 partitions across the range


def fetch_spread(client, offset=0):
    """``{partition: [(offset, value)]}`` of one Fetch over the partitions of SPREAD."""
    response = client.call(fetch_request([("many", p, offset) for p in SPREAD]))
    out = {}
    for data in response.responses[0].partitions:
        assert data.error_code == ErrorCode.none, data
        out[data.partition_index] = [(r.offset, r.value) for r in iter_records(data.records)]
    return out


@pytest.mark.slow
def test_a_broker_hosts_more_partitions_than_it_could_keep_files_open_for(cluster):
    # 400 partitions on a broker that may open 256 files: keeping the .log, .index and
    # .timeindex of each open took 1,200. The segment file cache holds 60 files (fewer
    # than one Fetch below reads), the partition limit is 400. (Kept small because each
    # new partition costs a few fsyncs; the same holds at 10,000 with a larger limit.)
    settings = dict(controller=True, nofile=256, overrides=[
        "ringlog.max.open.segment.files=60", f"ringlog.max.partitions.per.broker={MANY}"])
    broker = cluster.broker(**settings).start()
    client = cluster.client()
    wait_for(lambda: controller_and_brokers(client) == (0, [0]),
             "broker 0 to become the controller and be alive")
    baseline = psutil.Process(broker.pid).num_fds()

    response = client.call(create_topics_request({"many": (MANY, {})}))
    assert response.topics[0].error_code == ErrorCode.none, response
    response = client.call(create_topics_request({"one-more": (1, {})}))
    assert (response.topics[0].error_code, response.topics[0].error_message) == (
        ErrorCode.policy_violation, "topic 'one-more': broker 0 would host 401 partition "
        "replicas, more than ringlog.max.partitions.per.broker 400 (configured)")
    client.call(metadata_request(["auto-made"]))  # auto-creation obeys the limit too
    for name in ("one-more", "auto-made"):
        response = client.call(metadata_request([name], allow_auto_topic_creation=False))
        assert response.topics[0].error_code == ErrorCode.unknown_topic_or_partition
        assert not os.path.exists(os.path.join(cluster.data_dir, "broker-0", f"{name}-0"))

    for p in SPREAD:
        response = client.call(produce_request("many", p, batch([b"p%d" % p])))
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    assert fetch_spread(client) == {p: [(0, b"p%d" % p)] for p in SPREAD}
    assert psutil.Process(broker.pid).num_fds() <= baseline + 60
    assert broker.stop() == 0, broker.log()
    cluster.clients.remove(client)
    client.close()

    broker = cluster.broker(**settings).start()  # opens (and checks) all 400 logs
    client = cluster.client()
    for p in SPREAD:
        response = client.call(produce_request("many", p, batch([b"again"])))
        assert response.responses[0].partition_responses[0].base_offset == 1
    assert fetch_spread(client) == {p: [(0, b"p%d" % p), (1, b"again")] for p in SPREAD}
    assert psutil.Process(broker.pid).num_fds() <= baseline + 60
    assert broker.stop() == 0, broker.log()


def test_a_broker_loads_its_clients_produce_and_fetch_codecs_with_its_imports():
    """kio imports an API's schema modules at their first use (tens of ms for Produce and
    Fetch): a broker has them loaded by its own imports (its zygote's, before the fork), so
    its first Produce and Fetch do not pay for them."""
    code = ("import sys, replica_proc.__main__; "
            "print(sorted(m for m in sys.modules if m.startswith('kio.schema.')"
            " and m.rsplit('.', 1)[-1] in ('request', 'response')"
            " and m.split('.')[2] in ('produce', 'fetch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=BOUND, check=True)
    expected = [f"kio.schema.{name}.v{SUPPORTED_VERSIONS[key][1]}.{kind}"
                for name, key in (("produce", ApiKey.PRODUCE), ("fetch", ApiKey.FETCH))
                for kind in ("request", "response")]
    assert out.stdout.splitlines()[-1] == str(sorted(expected))
