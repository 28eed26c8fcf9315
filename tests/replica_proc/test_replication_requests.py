"""The leader side of replication through the request handler, in one process: Fetch
requests from followers (``replica_id`` >= 0), acks=all Produce requests that wait for
them (DelayedProduce), and the wake-ups of parked fetches. Real logs, encoded request frames and a
fake connection; a fake clock and a fake AlterPartition channel."""
from __future__ import annotations

import dataclasses

import pytest
from kio.schema.errors import ErrorCode

from segments.record.records import iter_records
from tests.support.broker import batch, fetch_request, produce_request
from tests.support.handlers import HandlerEnv

CLUSTER = "replication-cluster"
LAG_MS = 10_000


class Env(HandlerEnv):
    """A broker's request handler over real logs, leading partitions of ``topics``."""

    def __init__(self, tmp_path):
        super().__init__(tmp_path, CLUSTER, {"replica.lag.time.max.ms": LAG_MS})

    def publish(self, name, replicas=(0, 1, 2), isr=None, leader=0, epoch=0, configs=None):
        """Publish ``name`` (one partition) with this state and let the broker apply it."""
        self.publish_topic(name, [self.state(name, 0, leader, epoch, replicas, isr)], configs)


@pytest.fixture
def env(tmp_path):
    env = Env(tmp_path)
    yield env
    env.close()


def only(response):
    [topic] = response.responses
    [partition] = (topic.partitions if hasattr(topic, "partitions")
                   else topic.partition_responses)
    return partition


def produce(env, channel, topic, values, acks=-1):
    return env.send(channel, produce_request(topic, 0, batch(values), acks=acks))


def follower_fetch(env, replica, topic, offset, **kwargs):
    """A Fetch from follower ``replica`` at ``offset``; its partition's answer."""
    channel = env.channel(f"follower-{replica}")
    request = env.send(channel, fetch_request([(topic, 0, offset)], replica_id=replica,
                                              **kwargs))
    return channel, request


# -- Fetch from followers -------------------------------------------------------------------

def test_a_follower_fetch_reads_to_the_log_end_and_records_its_position(env):
    env.publish("t", replicas=(0, 1))
    producer = env.channel()
    request = produce(env, producer, "t", [b"a", b"b"], acks=1)
    assert only(env.answer(producer, request)).error_code == ErrorCode.none
    channel, request = follower_fetch(env, 1, "t", 0)
    data = only(env.answer(channel, request))
    assert data.error_code == ErrorCode.none and data.high_watermark == 0
    assert [r.value for r in iter_records(data.records)] == [b"a", b"b"]  # past the HW
    assert env.replicas.leader("t", 0).followers[1].log_end_offset == 0
    channel, request = follower_fetch(env, 1, "t", 2)
    data = only(env.answer(channel, request))
    assert data.high_watermark == 2  # the answer carries the HW this fetch moved
    assert env.replicas.leader("t", 0).high_watermark == 2


def test_a_fetch_from_a_broker_that_is_no_replica_is_not_leader_or_follower(env):
    env.publish("t", replicas=(0, 1))
    channel, request = follower_fetch(env, 2, "t", 0)
    assert only(env.answer(channel, request)).error_code == ErrorCode.not_leader_or_follower


def test_a_parked_consumer_fetch_wakes_on_the_hw_not_on_the_append(env):
    env.publish("t", replicas=(0, 1))
    consumer = env.channel("consumer")
    request = env.send(consumer, fetch_request([("t", 0, 0)], max_wait_ms=5000))
    assert consumer.parked is not None
    follower, follower_request = follower_fetch(env, 1, "t", 0, max_wait_ms=5000)
    assert follower.parked is not None
    producer = env.channel()
    produce(env, producer, "t", [b"a"], acks=1)
    assert consumer.parked is not None and consumer.conn.responses == []
    assert follower.parked is None  # the append woke the follower's fetch
    assert [r.value for r in iter_records(only(env.answer(follower, follower_request))
                                          .records)] == [b"a"]
    follower_fetch(env, 1, "t", 1)
    assert consumer.parked is None  # the follower's fetch moved the HW
    data = only(env.answer(consumer, request))
    assert data.high_watermark == 1 and [r.value for r in iter_records(data.records)] == [b"a"]


# -- acks=all -------------------------------------------------------------------------------

def test_acks_all_waits_for_the_isr_and_answers_when_a_follower_fetch_moves_the_hw(env):
    env.publish("t", replicas=(0, 1, 2))
    producer = env.channel()
    request = produce(env, producer, "t", [b"a", b"b"])
    assert producer.parked is not None and producer.conn.responses == []
    assert producer.next_request() is None  # muted: responses leave in request order
    follower_fetch(env, 1, "t", 2)
    assert producer.parked is not None  # follower 2 is in the ISR too
    follower_fetch(env, 2, "t", 2)
    assert producer.parked is None
    result = only(env.answer(producer, request))
    assert (result.error_code, result.base_offset) == (ErrorCode.none, 0)
    assert env.handler.next_deadline() is None


def test_acks_all_with_the_leader_alone_answers_at_once(env):
    env.publish("solo", replicas=(0,))
    producer = env.channel()
    request = produce(env, producer, "solo", [b"a"])
    assert producer.parked is None and len(env.handler.produce_purgatory) == 0
    assert only(env.answer(producer, request)).error_code == ErrorCode.none


def test_acks_all_times_out_with_request_timed_out(env):
    env.publish("t", replicas=(0, 1))
    producer = env.channel()
    request = produce(env, producer, "t", [b"a"])
    assert env.handler.next_deadline() == env.clock.now + 10.0  # the request's timeout
    env.clock.advance(9.9)
    env.handler.expire(env.clock.now)
    assert producer.parked is not None
    env.clock.advance(0.1)
    env.handler.expire(env.clock.now)
    assert producer.parked is None
    result = only(env.answer(producer, request))
    assert result.error_code == ErrorCode.request_timed_out and result.base_offset == 0
    assert "timeout of 10000 ms" in result.error_message


def test_acks_all_answers_not_enough_replicas_after_append(env):
    env.publish("t", replicas=(0, 1), configs={"min.insync.replicas": "2"})
    producer = env.channel()
    request = produce(env, producer, "t", [b"a"])
    env.publish("t", replicas=(0, 1), configs={"min.insync.replicas": "3"})  # above RF 2
    follower_fetch(env, 1, "t", 1)
    result = only(env.answer(producer, request))
    assert result.error_code == ErrorCode.not_enough_replicas_after_append
    assert result.base_offset == 0 and "min.insync.replicas=3" in result.error_message


def test_acks_all_answers_not_leader_when_a_new_image_moves_leadership(env):
    env.publish("t", replicas=(0, 1))
    producer = env.channel()
    request = produce(env, producer, "t", [b"a"])
    env.publish("t", replicas=(0, 1), isr=(1,), leader=1, epoch=1)
    assert producer.parked is None
    assert only(env.answer(producer, request)).error_code == ErrorCode.not_leader_or_follower


def test_a_dropped_connection_forgets_its_delayed_produce(env):
    env.publish("t", replicas=(0, 1))
    producer = env.channel()
    produce(env, producer, "t", [b"a"])
    env.handler.cancel(producer)
    assert producer.parked is None and len(env.handler.produce_purgatory) == 0
    follower_fetch(env, 1, "t", 1)
    assert producer.conn.responses == []


# -- ISR changes through the request path ---------------------------------------------------

def test_a_follower_fetch_at_the_hw_proposes_it_for_the_isr(env):
    env.publish("t", replicas=(0, 1), isr=(0,))
    producer = env.channel()
    produce(env, producer, "t", [b"a"], acks=1)
    follower_fetch(env, 1, "t", 0)
    assert env.alter.proposals == []  # below the HW (1)
    follower_fetch(env, 1, "t", 1)
    [(proposal, answer)] = env.alter.proposals
    assert proposal == ("t", 0, 0, 0, [0, 1])
    state = dataclasses.replace(env.topics["t"].partitions[0], isr=(0, 1))
    answer(0, state)
    assert env.replicas.leader("t", 0).isr == (0, 1)


def test_the_periodic_check_shrinks_the_isr_of_a_lagging_follower(env):
    env.publish("t", replicas=(0, 1, 2))
    producer = env.channel()
    produce(env, producer, "t", [b"a"], acks=1)
    follower_fetch(env, 1, "t", 1)
    env.clock.advance(LAG_MS / 1000 + 1)
    env.replicas.maybe_shrink_isr()
    assert [p for p, _ in env.alter.proposals] == [("t", 0, 0, 0, [0, 1])]


def test_a_shrink_committed_by_a_new_image_moves_the_hw_and_answers_acks_all(env):
    env.publish("t", replicas=(0, 1, 2))
    producer = env.channel()
    request = produce(env, producer, "t", [b"a"])
    follower_fetch(env, 1, "t", 1)
    assert producer.parked is not None  # follower 2, in the ISR, has not fetched
    env.clock.advance(LAG_MS / 1000 + 1)  # (till then, out of the ISR, it would still count)
    env.publish("t", replicas=(0, 1, 2), isr=(0, 1))
    assert env.replicas.leader("t", 0).high_watermark == 1
    assert only(env.answer(producer, request)).error_code == ErrorCode.none
