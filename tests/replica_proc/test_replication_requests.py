"""The leader side of replication through the request handler, in one process: Fetch
requests from followers (``replica_id`` >= 0), acks=all Produce requests that wait for
them (DelayedProduce), and the wake-ups of parked fetches. Real logs, encoded request frames and a
fake connection; a fake clock and a fake AlterPartition channel."""
from __future__ import annotations

import dataclasses

import pytest
from kio.schema.errors import ErrorCode

from cluster.protocol import frames as protocol
from replica_proc.channel import MAX_WAITING_PRODUCES, Channel
from segments.record.records import iter_records
from tests.support.broker import api_versions_request, batch, fetch_request, produce_request
from tests.support.handlers import ConnStub, HandlerEnv

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


def waiting(channel):
    """How many of the channel's answers wait for acks=all produces."""
    return len(channel.produces)


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
    assert waiting(producer) == 1 and producer.conn.responses == []
    follower_fetch(env, 1, "t", 2)
    assert waiting(producer) == 1  # follower 2 is in the ISR too
    follower_fetch(env, 2, "t", 2)
    assert waiting(producer) == 0
    result = only(env.answer(producer, request))
    assert (result.error_code, result.base_offset) == (ErrorCode.none, 0)
    assert env.handler.next_deadline() is None


def test_acks_all_with_the_leader_alone_answers_at_once(env):
    env.publish("solo", replicas=(0,))
    producer = env.channel()
    request = produce(env, producer, "solo", [b"a"])
    assert waiting(producer) == 0 and len(env.handler.produce_purgatory) == 0
    assert only(env.answer(producer, request)).error_code == ErrorCode.none


def test_acks_all_times_out_with_request_timed_out(env):
    env.publish("t", replicas=(0, 1))
    producer = env.channel()
    request = produce(env, producer, "t", [b"a"])
    assert env.handler.next_deadline() == env.clock.now + 10.0  # the request's timeout
    env.clock.advance(9.9)
    env.handler.expire(env.clock.now)
    assert waiting(producer) == 1
    env.clock.advance(0.1)
    env.handler.expire(env.clock.now)
    assert waiting(producer) == 0
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
    assert waiting(producer) == 0
    assert only(env.answer(producer, request)).error_code == ErrorCode.not_leader_or_follower


def test_a_dropped_connection_forgets_its_delayed_produce(env):
    env.publish("t", replicas=(0, 1))
    producer = env.channel()
    produce(env, producer, "t", [b"a"])
    env.handler.cancel(producer)
    assert waiting(producer) == 0 and len(env.handler.produce_purgatory) == 0
    follower_fetch(env, 1, "t", 1)
    assert producer.conn.responses == []


class QueuedConn(ConnStub):
    """A connection whose request ring holds ``frames`` (read by the channel in order)."""

    def __init__(self, name, frames):
        super().__init__(name)
        self.frames = list(frames)

    def recv(self):
        return self.frames.pop(0) if self.frames else None


def frame_of(request, correlation_id):
    return protocol.encode_request(request, correlation_id, "client-1")


def serve(env, channel):
    """What the broker's loop does with a channel: handle its requests until it is muted
    or has none; the requests handled."""
    handled = 0
    while (frame := channel.next_request()) is not None:
        env.handler.handle(channel, frame)
        handled += 1
    channel.settle()
    return handled


def decoded(channel, *requests):
    """The channel's responses, decoded as answers to ``requests`` in order: (correlation
    id, body) each."""
    frames, channel.conn.responses[:] = list(channel.conn.responses), []
    assert len(frames) == len(requests)
    return [protocol.decode_response(f, r.__api_key__, r.__version__)
            for f, r in zip(frames, requests)]


def test_acks_all_produces_of_one_connection_wait_together_and_answer_in_order(env):
    env.publish("t", replicas=(0, 1, 2))
    env.publish("solo", replicas=(0,))
    requests = [produce_request("t", 0, batch([b"a"]), acks=-1),
                produce_request("solo", 0, batch([b"b"]), acks=-1),
                produce_request("t", 0, batch([b"c"]), acks=-1)]
    producer = Channel(QueuedConn("producer", [frame_of(r, n + 1)
                                               for n, r in enumerate(requests)]))
    assert serve(env, producer) == 3  # not muted by the first one's wait
    assert env.replicas.leader("t", 0).log.log_end_offset == 2  # both appended already
    assert producer.conn.responses == []  # solo's answer waits behind the first
    follower_fetch(env, 1, "t", 1)
    follower_fetch(env, 2, "t", 1)
    first, solo = decoded(producer, *requests[:2])
    assert (first[0], only(first[1]).base_offset) == (1, 0)
    assert (solo[0], only(solo[1]).error_code, only(solo[1]).base_offset) == (
        2, ErrorCode.none, 0)
    assert waiting(producer) == 1
    follower_fetch(env, 1, "t", 2)
    follower_fetch(env, 2, "t", 2)
    [(correlation_id, last)] = decoded(producer, requests[2])
    assert (correlation_id, only(last).base_offset) == (3, 1)


def test_a_request_other_than_produce_waits_for_the_produces_before_it(env):
    env.publish("t", replicas=(0, 1))
    requests = [produce_request("t", 0, batch([b"a"]), acks=-1), api_versions_request(),
                produce_request("t", 0, batch([b"b"]), acks=1)]
    producer = Channel(QueuedConn("producer", [frame_of(r, n + 1)
                                               for n, r in enumerate(requests)]))
    assert serve(env, producer) == 1
    assert producer.muted and not producer.needs_service
    assert env.replicas.leader("t", 0).log.log_end_offset == 1  # the acks=1 one waits too
    follower_fetch(env, 1, "t", 1)
    assert not producer.muted and producer.needs_service
    assert serve(env, producer) == 2
    answers = decoded(producer, *requests)
    assert [correlation_id for correlation_id, _ in answers] == [1, 2, 3]
    assert answers[1][1].error_code == ErrorCode.none
    assert only(answers[2][1]).base_offset == 1


def test_a_connection_with_the_most_waiting_produces_is_muted_until_one_is_answered(env):
    env.publish("t", replicas=(0, 1))
    requests = [produce_request("t", 0, batch([b"%d" % n]), acks=-1)
                for n in range(MAX_WAITING_PRODUCES + 1)]
    producer = Channel(QueuedConn("producer", [frame_of(r, n + 1)
                                               for n, r in enumerate(requests)]))
    assert serve(env, producer) == MAX_WAITING_PRODUCES
    assert producer.muted
    follower_fetch(env, 1, "t", 1)  # the first is replicated
    assert not producer.muted
    assert serve(env, producer) == 1
    follower_fetch(env, 1, "t", MAX_WAITING_PRODUCES + 1)
    answers = decoded(producer, *requests)
    assert [only(body).base_offset for _, body in answers] == list(range(len(requests)))


def test_a_dropped_connection_forgets_every_waiting_produce(env):
    env.publish("t", replicas=(0, 1))
    producer = env.channel()
    produce(env, producer, "t", [b"a"])
    produce(env, producer, "t", [b"b"])
    assert waiting(producer) == 2 and len(env.handler.produce_purgatory) == 2
    env.handler.cancel(producer)
    assert waiting(producer) == 0 and len(env.handler.produce_purgatory) == 0
    follower_fetch(env, 1, "t", 2)
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
    assert waiting(producer) == 1  # follower 2, in the ISR, has not fetched
    env.clock.advance(LAG_MS / 1000 + 1)  # (till then, out of the ISR, it would still count)
    env.publish("t", replicas=(0, 1, 2), isr=(0, 1))
    assert env.replicas.leader("t", 0).high_watermark == 1
    assert only(env.answer(producer, request)).error_code == ErrorCode.none
