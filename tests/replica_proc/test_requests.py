"""The broker process over real rings: every API, the long poll, and each bad input of issue 3.

One broker process serves the whole module (tests/support/broker_runner.py: no controller; the test
publishes the metadata images on the metadata page). Each test uses its own topics, and
after every bad input the test checks the broker still serves another connection.
"""
from __future__ import annotations

import datetime
import os
import random
import signal

import pytest
from kio.schema.errors import ErrorCode

from cluster.protocol import frame_descriptor as protocol_descriptor, frames as protocol
from cluster.protocol.frames import ApiKey
from segments.record import batch_descriptor as d
from segments.record.records import RecordBatchBuilder, iter_records
from shm_ring import PeerClosedError, list_objects
from tests.support.bounds import BOUND
from tests.support.broker import (
    BrokerEnv,
    Client,
    api_versions_request,
    batch,
    create_partitions_request,
    create_topics_request,
    delete_topics_request,
    fetch_request,
    list_offsets_request,
    metadata_request,
    offsets_for_leader_epoch_request,
    produce_request,
)
from tests.support.clock import T0
from tests.support.processes import CTX
from tests.support.waits import wait_for

# Every test talks to the module's broker process.
pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with BrokerEnv.started(tmp_path_factory.mktemp("broker")) as env:
        yield env


def still_serving(env):
    """A fresh connection gets an answer: the broker survived whatever came before."""
    client = env.client()
    response = client.call(api_versions_request())
    assert response.error_code == ErrorCode.none
    client.close()
    env.clients.remove(client)


def only_partition(response):
    [topic] = response.responses
    [partition] = topic.partitions if hasattr(topic, "partitions") else \
        topic.partition_responses
    return partition


def records_of(data):
    return [(r.offset, r.value) for r in iter_records(data)]


def end_offset(client, topic, partition=0):
    response = client.call(list_offsets_request(topic, partition, -1))
    return response.topics[0].partitions[0].offset


def test_a_serving_broker_has_frozen_its_start_up_objects(env):
    """ringlog.gc.freeze (default true): gc.freeze() before serving, counted in the log."""
    # broker.json says serving a moment before the line is logged: wait for the line
    line = wait_for(lambda: next((line for line in env.broker.log().splitlines()
                                  if " serving: " in line), None), "the broker's serving line")
    frozen = int(line.rsplit(", ", 1)[1].split()[0])
    assert frozen > 10_000  # every module, class and function imported, at least


# -- the APIs ----------------------------------------------------------------------------------

def test_api_versions_lists_what_the_broker_serves(env):
    client = env.client()
    response = client.call(api_versions_request(2))
    served = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert served == {0: (3, 8), 1: (4, 11), 2: (1, 5), 3: (1, 8), 8: (2, 7), 9: (1, 7),
                      10: (0, 2), 11: (2, 5), 12: (1, 3), 13: (1, 3), 14: (1, 3), 15: (0, 4),
                      16: (0, 2), 18: (0, 3), 19: (2, 4), 20: (1, 3), 23: (2, 3), 32: (1, 3),
                      33: (0, 1), 37: (0, 1), 42: (0, 1), 43: (0, 1), 44: (0, 0), 47: (0, 0),
                      27: (1, 1), 56: (2, 3), 22: (0, 1), 67: (0, 0), 24: (0, 2), 25: (0, 2),
                      26: (0, 2), 28: (0, 3), 61: (0, 0), 65: (0, 0), 66: (0, 1)}


@pytest.mark.parametrize("version", [0, 1])
def test_init_producer_id_without_a_block_or_with_a_transactional_id(env, version):
    client = env.client()
    cls = protocol.request_class(ApiKey.INIT_PRODUCER_ID, version)
    timeout = datetime.timedelta(seconds=60)
    # this module's broker has no controller to get a block of producer ids from
    response = client.call(cls(transactional_id=None, transaction_timeout=timeout))
    assert (response.error_code, response.producer_id) == (
        ErrorCode.coordinator_load_in_progress, -1)
    # the transaction coordinator: this broker leads no __transaction_state partition
    response = client.call(cls(transactional_id="tx", transaction_timeout=timeout))
    assert (response.error_code, response.producer_id) == (ErrorCode.not_coordinator, -1)


def test_api_versions_of_an_unsupported_version_answers_v0_with_unsupported_version(env):
    client = env.client()
    request = api_versions_request(2)
    frame = bytearray(protocol.encode_request(request, 77, "future-client"))
    protocol_descriptor.INT16.pack_into(frame, protocol_descriptor.API_VERSION_OFFSET, 9)
    client.send_raw(frame)
    response_frame = client.conn.recv(BOUND)
    correlation_id, response = protocol.decode_response(response_frame, ApiKey.API_VERSIONS, 0)
    del response_frame
    client.conn.release()
    assert correlation_id == 77
    assert response.error_code == ErrorCode.unsupported_version
    # ApiVersions' own range only, as Kafka answers (ApiVersionsRequest.getErrorResponse)
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [
        (ApiKey.API_VERSIONS, 0, 3)]
    still_serving(env)


def api_versions_v3(name, version):
    m = protocol.request_module(ApiKey.API_VERSIONS, 3)
    return m.ApiVersionsRequest(client_software_name=name, client_software_version=version)


def test_api_versions_v3_lists_what_v2_lists(env):
    client = env.client()
    v3 = client.call(api_versions_v3("librdkafka", "2.0.2"))
    v2 = client.call(api_versions_request(2))
    assert v3.error_code == ErrorCode.none
    assert [(k.api_key, k.min_version, k.max_version) for k in v3.api_keys] == [
        (k.api_key, k.min_version, k.max_version) for k in v2.api_keys]
    assert v3.throttle_time == datetime.timedelta(0)


@pytest.mark.parametrize("name,version", [
    ("", "1.0"), ("bad name", "1.0"), ("-lead", "1.0"), ("ok", "1.0-"), ("ok", "1.0\n"),
    ("ok", "1.0+build")])
def test_api_versions_v3_with_a_bad_software_name_or_version_is_invalid_request(
        env, name, version):
    client = env.client()
    response = client.call(api_versions_v3(name, version))
    assert (response.error_code, response.api_keys) == (ErrorCode.invalid_request, ())
    still_serving(env)  # the broker, and this connection, go on
    assert client.call(api_versions_v3("kafka-python", "3.0.0-rc1")).error_code == 0


@pytest.mark.parametrize("produce_version,fetch_version", [(3, 4), (5, 7), (8, 11)])
def test_produce_then_fetch_returns_the_same_records(env, produce_version, fetch_version):
    topic = f"round-trip-{produce_version}"
    env.publish(**{topic: (1, {})})
    client = env.client()
    values = [[b"a%d-%d" % (n, i) for i in range(50)] for n in range(3)]
    offsets = []
    for chunk in values:
        response = client.call(produce_request(topic, 0, batch(chunk), version=produce_version))
        partition = only_partition(response)
        assert partition.error_code == ErrorCode.none
        offsets.append(partition.base_offset)
    assert offsets == [0, 50, 100]
    response = client.call(fetch_request([(topic, 0, 0)], version=fetch_version))
    partition = only_partition(response)
    assert partition.error_code == ErrorCode.none
    assert partition.high_watermark == 150
    assert records_of(partition.records) == list(enumerate(v for c in values for v in c))


def test_fetch_returns_the_whole_batch_holding_the_offset_and_respects_max_bytes(env):
    env.publish(**{"whole-batches": (1, {})})
    client = env.client()
    for _n in range(4):
        client.call(produce_request("whole-batches", 0, batch([b"x" * 100] * 10)))
    # offset 15 is in the middle of the second batch (10..19): that batch comes whole
    response = client.call(fetch_request([("whole-batches", 0, 15)], partition_max_bytes=1))
    offsets = [offset for offset, _ in records_of(only_partition(response).records)]
    assert offsets == list(range(10, 20))  # at least one batch even past the limit (KIP-74)
    one_batch = len(only_partition(response).records)
    response = client.call(fetch_request([("whole-batches", 0, 0)],
                                         partition_max_bytes=2 * one_batch + 10))
    assert len(only_partition(response).records) == 2 * one_batch


def test_fetch_across_partitions_caps_the_total_at_max_bytes(env):
    env.publish(**{"total-cap": (2, {})})
    client = env.client()
    for partition in (0, 1):
        client.call(produce_request("total-cap", partition, batch([b"y" * 100] * 10)))
    size = len(only_partition(client.call(fetch_request([("total-cap", 0, 0)]))).records)
    response = client.call(fetch_request([("total-cap", 0, 0), ("total-cap", 1, 0)],
                                         max_bytes=size))
    parts = response.responses[0].partitions
    assert [len(p.records) for p in parts] == [size, 0]


def test_long_poll_is_answered_when_a_record_is_appended(env):
    env.publish(**{"long-poll": (1, {})})
    consumer, producer = env.client(), env.client()
    consumer.send(fetch_request([("long-poll", 0, 0)], max_wait_ms=600_000, min_bytes=1))
    assert consumer.receive(timeout=0.2) is None  # parked: nothing to read yet
    producer.call(produce_request("long-poll", 0, batch([b"wake up"])))
    received = consumer.receive(timeout=BOUND)  # far sooner than the 600 s max wait
    assert received is not None, "the parked fetch was not answered after the append"
    assert records_of(only_partition(received[1]).records) == [(0, b"wake up")]


def test_long_poll_waits_for_min_bytes(env):
    env.publish(**{"min-bytes": (1, {})})
    consumer, producer = env.client(), env.client()
    small = batch([b"s"])
    consumer.send(fetch_request([("min-bytes", 0, 0)], max_wait_ms=600_000,
                                min_bytes=3 * len(small)))
    for n in range(2):
        producer.call(produce_request("min-bytes", 0, small))
        assert consumer.receive(timeout=0.1) is None, f"answered after {n + 1} small batches"
    producer.call(produce_request("min-bytes", 0, small))
    received = consumer.receive(timeout=BOUND)
    assert received is not None
    assert len(records_of(only_partition(received[1]).records)) == 3


def test_long_poll_ends_at_max_wait_with_nothing(env):
    env.publish(**{"max-wait": (1, {})})
    client = env.client()
    response = client.call(fetch_request([("max-wait", 0, 0)], max_wait_ms=50, min_bytes=1))
    partition = only_partition(response)
    assert partition.error_code == ErrorCode.none and partition.records == b""


def test_requests_behind_a_parked_fetch_are_answered_in_order(env):
    env.publish(**{"in-order": (1, {})})
    client, producer = env.client(), env.client()
    first = client.send(fetch_request([("in-order", 0, 0)], max_wait_ms=600_000))
    second = client.send(api_versions_request())
    assert client.receive(timeout=0.2) is None  # the ApiVersions waits behind the fetch
    producer.call(produce_request("in-order", 0, batch([b"go"])))
    assert client.receive()[0] == first
    assert client.receive()[0] == second


def test_large_produces_behind_a_parked_fetch_and_a_fetch_longer_than_a_frame(env):
    """The copy paths of large values: produce requests of 256 KB or more (read as views of
    the ring, appended with one pwritev) waiting as views in a muted channel's backlog, then
    read back in a Fetch response longer than the client's largest ring frame (fragments
    filled from the log file)."""
    env.publish(**{"large-values": (1, {})})
    client, producer = env.client(capacity=1 << 20), env.client()
    values = [[bytes([65 + n]) * 150_000, bytes([97 + n]) * 150_000] for n in range(2)]
    parked = client.send(fetch_request([("large-values", 0, 0)], max_wait_ms=600_000))
    produces = [client.send(produce_request("large-values", 0, batch(chunk)))
                for chunk in values]
    assert client.receive(timeout=0.2) is None  # the produces wait behind the fetch
    producer.call(produce_request("large-values", 0, batch([b"go"])))
    assert client.receive()[0] == parked
    answers = [client.receive() for _ in produces]
    assert [correlation for correlation, _ in answers] == produces
    assert [only_partition(body).base_offset for _, body in answers] == [1, 3]
    response = client.call(fetch_request([("large-values", 0, 0)],
                                         partition_max_bytes=1 << 22))
    partition = only_partition(response)
    assert len(partition.records) > client.conn.max_request_frame  # it came as fragments
    assert records_of(partition.records) == list(enumerate(
        [b"go"] + [v for chunk in values for v in chunk]))


def test_acks_0_gets_no_response_and_is_appended(env):
    env.publish(**{"acks-zero": (1, {})})
    client = env.client()
    client.send(produce_request("acks-zero", 0, batch([b"fire", b"forget"]), acks=0))
    correlation_id = client.send(api_versions_request())
    assert client.receive()[0] == correlation_id  # no response to the produce came first
    assert end_offset(client, "acks-zero") == 2


def test_a_failed_acks_0_produce_closes_the_connection(env):
    client = env.client()
    client.send(produce_request("no-such-topic-for-acks-0", 0, batch([b"v"]), acks=0))
    client.send(api_versions_request())
    with pytest.raises(PeerClosedError):  # as Kafka: the producer learns by the close
        client.receive(timeout=BOUND)
    still_serving(env)


def test_acks_all_with_too_few_in_sync_replicas_is_refused(env):
    env.publish(**{"min-isr": (1, {"min.insync.replicas": "2"})})
    client = env.client()
    partition = only_partition(client.call(produce_request("min-isr", 0, batch([b"v"]),
                                                           acks=-1)))
    assert partition.error_code == ErrorCode.not_enough_replicas
    assert "min.insync.replicas=2" in partition.error_message
    assert end_offset(client, "min-isr") == 0
    partition = only_partition(client.call(produce_request("min-isr", 0, batch([b"v"]),
                                                           acks=1)))
    assert partition.error_code == ErrorCode.none


def test_list_offsets_earliest_latest_and_by_timestamp(env):
    env.publish(offsets=(1, {}))
    client = env.client()
    client.call(produce_request("offsets", 0, batch([b"a", b"b", b"c"], timestamp=T0)))
    client.call(produce_request("offsets", 0, batch([b"d", b"e"], timestamp=T0 + 1000)))

    def lookup(timestamp, version=5):
        response = client.call(list_offsets_request("offsets", 0, timestamp, version))
        p = response.topics[0].partitions[0]
        assert p.error_code == ErrorCode.none
        return p.timestamp, p.offset
    assert lookup(-2)[1] == 0
    assert lookup(-1)[1] == 5
    assert lookup(T0 + 1) == (T0 + 1, 1)
    assert lookup(T0 + 500, version=1) == (T0 + 1000, 3)
    assert lookup(T0 + 5000) == (-1, -1)


@pytest.mark.parametrize("version", [2, 3])
def test_offsets_for_leader_epoch_answers_the_epochs_end(env, version):
    topic = f"epochs-{version}"
    env.publish(**{topic: (1, {})})
    client = env.client()
    client.call(produce_request(topic, 0, batch([b"a", b"b", b"c"])))
    response = client.call(offsets_for_leader_epoch_request(
        topic, [(0, 0, 0), (0, 0, 1), (0, 1, 0), (3, -1, 0)], version))
    assert [(p.error_code, p.partition, p.leader_epoch, p.end_offset)
            for p in response.topics[0].partitions] == [
        (ErrorCode.none, 0, 0, 3),  # the latest epoch ends at the log end offset
        (ErrorCode.none, 0, -1, -1),  # an epoch newer than any
        (ErrorCode.unknown_leader_epoch, 0, -1, -1),
        (ErrorCode.unknown_topic_or_partition, 3, -1, -1)]


def test_metadata_lists_topics_partitions_and_leaders(env):
    env.publish(described=(3, {}), elsewhere=(1, {}, 1))
    client = env.client()
    response = client.call(metadata_request(["described", "elsewhere"]))
    assert response.cluster_id == env.cluster_id
    assert [b.node_id for b in response.brokers] == [0]
    described, elsewhere = response.topics
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes)
            for p in described.partitions] == [(n, 0, (0,), (0,)) for n in range(3)]
    assert elsewhere.partitions[0].leader_id == 1
    assert elsewhere.partitions[0].offline_replicas == (1,)  # broker 1 is not alive


# -- bad input -----------------------------------------------------------------------------

def test_unknown_topic_with_auto_create_off(env):
    client = env.client()
    response = client.call(metadata_request(["no-such-topic"]))
    assert response.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    partition = only_partition(client.call(produce_request("no-such-topic", 0, batch([b"v"]))))
    assert partition.error_code == ErrorCode.unknown_topic_or_partition
    assert "'no-such-topic'" in partition.error_message
    still_serving(env)


def test_invalid_topic_name(env):
    client = env.client()
    response = client.call(metadata_request(["bad/name"]))
    assert response.topics[0].error_code == ErrorCode.invalid_topic_exception


def test_a_partition_that_does_not_exist(env):
    env.publish(**{"two-partitions": (2, {})})
    client = env.client()
    partition = only_partition(client.call(produce_request("two-partitions", 7, batch([b"v"]))))
    assert partition.error_code == ErrorCode.unknown_topic_or_partition
    assert "not 7" in partition.error_message
    response = client.call(fetch_request([("two-partitions", 7, 0)]))
    assert only_partition(response).error_code == ErrorCode.unknown_topic_or_partition
    still_serving(env)


def test_a_partition_led_elsewhere_is_not_leader_or_follower(env):
    env.publish(**{"led-by-1": (1, {}, 1)})
    client = env.client()
    partition = only_partition(client.call(produce_request("led-by-1", 0, batch([b"v"]))))
    assert partition.error_code == ErrorCode.not_leader_or_follower


def test_a_batch_with_a_bad_crc_is_corrupt_and_appends_nothing(env):
    env.publish(**{"bad-crc": (1, {})})
    client = env.client()
    client.call(produce_request("bad-crc", 0, batch([b"good"])))
    bad = bytearray(batch([b"flipped"]))
    bad[-3] ^= 0xFF
    partition = only_partition(client.call(produce_request("bad-crc", 0, bytes(bad))))
    assert partition.error_code == ErrorCode.corrupt_message
    assert "crc" in partition.error_message.lower()
    assert end_offset(client, "bad-crc") == 1
    # a request whose second batch is bad appends neither
    partition = only_partition(client.call(produce_request(
        "bad-crc", 0, batch([b"first"]) + bytes(bad))))
    assert partition.error_code == ErrorCode.corrupt_message
    assert end_offset(client, "bad-crc") == 1
    still_serving(env)


def test_an_idempotent_retry_gets_its_original_offset_and_a_gap_is_out_of_order(env):
    env.publish(idempotent=(1, {}))
    client = env.client()

    def send(epoch, sequence, count):
        builder = RecordBatchBuilder(0, 1 << 20, producer_id=77, producer_epoch=epoch,
                                     base_sequence=sequence)
        for n in range(count):
            builder.append(T0 + n, b"k", b"v")
        return only_partition(client.call(produce_request(
            "idempotent", 0, bytes(builder.build()), acks=-1)))

    assert send(0, 0, 3).base_offset == 0
    assert send(0, 3, 2).base_offset == 3
    retry = send(0, 0, 3)
    assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 0)
    assert send(0, 9, 1).error_code == ErrorCode.out_of_order_sequence_number
    assert send(0, 5, 1).base_offset == 5
    assert send(1, 4, 1).error_code == ErrorCode.out_of_order_sequence_number
    assert send(1, 0, 1).base_offset == 6
    assert send(0, 6, 1).error_code == ErrorCode.invalid_producer_epoch
    assert end_offset(client, "idempotent") == 7
    still_serving(env)


def test_a_batch_larger_than_max_message_bytes(env):
    env.publish(**{"small-messages": (1, {"max.message.bytes": "1000"})})
    client = env.client()
    partition = only_partition(client.call(produce_request("small-messages", 0,
                                                           batch([b"z" * 2000]))))
    assert partition.error_code == ErrorCode.message_too_large
    assert "max.message.bytes 1000" in partition.error_message
    assert end_offset(client, "small-messages") == 0
    still_serving(env)


def test_a_produce_without_a_batch_is_an_invalid_record(env):
    env.publish(**{"empty-produce": (1, {})})
    client = env.client()
    partition = only_partition(client.call(produce_request("empty-produce", 0, b"")))
    assert partition.error_code == ErrorCode.invalid_record


def test_a_fetch_offset_out_of_range_says_where_the_log_is(env):
    env.publish(**{"out-of-range": (1, {})})
    client = env.client()
    client.call(produce_request("out-of-range", 0, batch([b"a", b"b"])))
    partition = only_partition(client.call(fetch_request([("out-of-range", 0, 99)])))
    assert partition.error_code == ErrorCode.offset_out_of_range
    assert (partition.high_watermark, partition.log_start_offset) == (2, 0)
    assert partition.records == b""
    still_serving(env)


def test_a_renumbered_batch_met_by_a_fetch_fails_that_partition_only(env):
    """baseOffset is outside the CRC; the read path walks batch headers to find the offset
    and refuses offsets that go backwards: KAFKA_STORAGE_ERROR for that partition, the
    other partitions and the connection still served."""
    env.publish(renumbered=(2, {}))
    client = env.client()
    for partition in (0, 1):
        for _n in range(4):
            client.call(produce_request("renumbered", partition, batch([b"r" * 50] * 10)))
    [log_path] = env.data_dir.rglob("renumbered-0/*.log")
    with open(log_path, "r+b") as f:  # the third batch (20..29) renumbered from 15
        size = d.LOG_OVERHEAD + d.INT32.unpack(f.read(d.LOG_OVERHEAD)[8:])[0]
        f.seek(2 * size)
        f.write(d.INT64.pack(15))
    response = client.call(fetch_request([("renumbered", 0, 20), ("renumbered", 1, 20)]))
    bad, good = response.responses[0].partitions
    assert bad.error_code == ErrorCode.kafka_storage_error and bad.records == b""
    assert good.error_code == ErrorCode.none
    assert [offset for offset, _ in records_of(good.records)] == list(range(20, 40))
    still_serving(env)


def test_garbage_in_the_request_ring_closes_that_connection_only(env):
    bystander = env.client()
    victim = env.client()
    victim.send_raw(b"\x00\x00\x00\x10this is not kafka")
    with pytest.raises(PeerClosedError):
        victim.receive(timeout=BOUND)
    assert bystander.call(api_versions_request()).error_code == ErrorCode.none
    still_serving(env)


def test_an_api_the_broker_does_not_serve_closes_the_connection(env):
    client = env.client()
    m = protocol.request_module(ApiKey.DELETE_RECORDS, 0)
    client.send(m.DeleteRecordsRequest(topics=(), timeout=datetime.timedelta(seconds=60)))
    with pytest.raises(PeerClosedError):
        client.receive(timeout=BOUND)
    client = env.client()
    frame = bytearray(protocol.encode_request(api_versions_request(), 1, "x"))
    protocol_descriptor.INT16.pack_into(frame, protocol_descriptor.API_KEY_OFFSET, 999)
    client.send_raw(frame)
    with pytest.raises(PeerClosedError):
        client.receive(timeout=BOUND)
    still_serving(env)


def test_random_and_mangled_frames_never_stop_the_broker(env):
    """Random bytes, and valid requests with bytes flipped: each is answered or its
    connection closed; the broker keeps serving."""
    env.publish(fuzzed=(2, {}))
    rng = random.Random(3)
    valid = [protocol.encode_request(r, 1, "fuzz") for r in (
        produce_request("fuzzed", 0, batch([b"v"] * 3)), fetch_request([("fuzzed", 1, 0)]),
        metadata_request(["fuzzed"]), list_offsets_request("fuzzed", 0, -1),
        create_topics_request({"x": (1, {})}))]
    frames = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
              for _ in range(10)]
    for _ in range(40):
        frame = bytearray(rng.choice(valid))
        for _ in range(rng.randrange(1, 4)):
            frame[rng.randrange(4, len(frame))] = rng.randrange(256)
        frames.append(bytes(frame))
    for frame in frames:
        client = Client(env.cluster_id, capacity=1 << 16)
        try:
            client.send_raw(frame)
            try:
                client.conn.recv(0.5)  # an answer, a close, or nothing (acks=0 and such)
            except PeerClosedError:
                pass
        finally:
            client.close()
    still_serving(env)


def test_admin_requests_on_a_broker_that_is_not_the_controller(env):
    client = env.client()
    response = client.call(create_topics_request({"new-topic": (1, {})}))
    assert response.topics[0].error_code == ErrorCode.not_controller
    response = client.call(delete_topics_request(["new-topic"]))
    assert response.responses[0].error_code == ErrorCode.not_controller
    response = client.call(create_partitions_request("new-topic", 3))
    assert response.results[0].error_code == ErrorCode.not_controller
    m = protocol.request_module(ApiKey.ELECT_LEADERS, 1)
    response = client.call(m.ElectLeadersRequest(election_type=0, topic_partitions=None))
    assert (response.error_code, response.replica_election_results) == (
        ErrorCode.not_controller, ())
    m = protocol.request_module(ApiKey.ALTER_PARTITION, 3)
    response = client.call(m.AlterPartitionRequest(broker_id=0, topics=()))
    assert (response.error_code, response.topics) == (ErrorCode.not_controller, ())


def _parked_client(cluster_id, topic, ready):
    """A client process that parks a long-poll fetch and a queue of produces, then waits
    to be killed."""
    client = Client(cluster_id)
    client.send(fetch_request([(topic, 0, 0)], max_wait_ms=600_000))
    for _ in range(20):
        client.send(produce_request(topic, 0, batch([b"queued"])))
    ready.send(client.conn.name)
    ready.recv()  # never comes: the test kills this process


def test_a_client_killed_mid_request_is_dropped_and_its_rings_freed(env):
    env.publish(**{"killed-client": (1, {})})
    parent, child = CTX.Pipe()
    process = CTX.Process(target=_parked_client, args=(env.cluster_id, "killed-client", child),
                          daemon=True)
    process.start()
    try:
        assert parent.poll(BOUND), "the client process did not start"
        name = parent.recv()
        os.kill(process.pid, signal.SIGKILL)
        process.join(BOUND)
        wait_for(lambda: not [n for n in list_objects(env.cluster_id) if n.startswith(name)],
                 f"the broker to unlink the dead client's {name}")
    finally:
        if process.is_alive():
            os.kill(process.pid, signal.SIGKILL)
        process.join(BOUND)
    still_serving(env)


def test_a_deleted_topic_loses_its_log_and_its_parked_fetches_are_answered(env):
    env.publish(**{"to-delete": (1, {})})
    client, other = env.client(), env.client()
    client.call(produce_request("to-delete", 0, batch([b"v"])))
    path = os.path.join(env.data_dir, "broker-0", "to-delete-0")
    assert os.path.isdir(path)
    other.send(fetch_request([("to-delete", 0, 1)], max_wait_ms=600_000))
    env.publish(**{"to-delete": None})
    received = other.receive(timeout=BOUND)
    assert only_partition(received[1]).error_code == ErrorCode.unknown_topic_or_partition
    assert not os.path.exists(path)
    partition = only_partition(client.call(produce_request("to-delete", 0, batch([b"v"]))))
    assert partition.error_code == ErrorCode.unknown_topic_or_partition


def test_a_batch_larger_than_the_clients_response_frames_is_served_in_fragments(env):
    env.publish(**{"big-batch": (1, {})})
    producer = env.client()
    producer.call(produce_request("big-batch", 0, batch([b"b" * 200_000])))
    small_ring = env.client(capacity=1 << 16)  # frames of at most ~32 KiB
    for client in (small_ring, producer):
        partition = only_partition(client.call(fetch_request([("big-batch", 0, 0)])))
        assert partition.error_code == 0
        assert records_of(partition.records) == [(0, b"b" * 200_000)]


def test_a_full_response_ring_holds_the_answer_until_the_client_reads(env):
    env.publish(**{"full-ring": (1, {})})
    client = env.client(capacity=1 << 16)  # frames of at most ~32 KiB
    client.call(produce_request("full-ring", 0, batch([b"r" * 1000] * 20)))
    sent = [client.send(fetch_request([("full-ring", 0, 0)])) for _ in range(6)]
    received = [client.receive()[0] for _ in sent]  # the later ones waited for room
    assert received == sent
