"""ElectLeaders v0-1 at the request level: frames decoded as the broker decodes them, handed
to ``AdminHandler.elect_leaders`` over a real controller (the controller tests' ``Env``),
and the response frames decoded as a client decodes them."""
from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode

from cluster.metadata.model import PartitionState
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey, ElectionType
from replica_proc.admin_handler import AdminHandler
from replica_proc.controller import metadata_log as mr
from replica_proc.controller.metadata_log import MetadataLog
from tests.replica_proc.controller.env import Env


class Channel:
    """What the handler answers on: the frames it sent."""

    def __init__(self):
        self.frames = []

    def send(self, frame):
        self.frames.append(bytes(frame))


class PageMetadata:
    """The broker's view of the metadata: the newest image on the page."""

    def __init__(self, page):
        self.page = page

    @property
    def image(self):
        return self.page.read()


@pytest.fixture
def env(tmp_path):
    environment = Env(tmp_path)
    for b in range(3):
        environment.start_broker(b)
    controller = environment.controller(0)
    environment.poll(controller)
    controller.create_topics([{"name": "t", "assignments": {0: [0, 1, 2], 1: [1, 2, 0]}}])
    controller.close()
    metadata_log = MetadataLog(environment.data_dir)  # t-0 led by a follower in the ISR
    _, epoch = metadata_log.replay(environment.cluster_id)
    metadata_log.append([mr.partition_record(PartitionState("t", 0, 1, 3, (0, 1, 2),
                                                            (0, 1, 2)))], epoch)
    metadata_log.close()
    yield environment
    environment.close()


def handler_of(env, broker_id):
    controller = env.controller(broker_id)
    env.poll(controller)
    changes = []
    handler = AdminHandler(broker_id, PageMetadata(env.page), controller, None,
                           lambda: changes.append(1), lambda: env.now)
    return handler, changes


def call(handler, version, topic_partitions, election_type=ElectionType.PREFERRED):
    m = protocol.request_module(ApiKey.ELECT_LEADERS, version)
    fields = {"topic_partitions": None if topic_partitions is None else tuple(
        m.TopicPartitions(topic=t, partitions=tuple(ps)) for t, ps in topic_partitions.items()),
        "timeout": datetime.timedelta(seconds=5)}
    if version >= 1:
        fields["election_type"] = election_type
    header, request = protocol.decode_request(
        bytes(protocol.encode_request(m.ElectLeadersRequest(**fields), 7, "test")))
    channel = Channel()
    handler.elect_leaders(channel, header, request)
    (frame,) = channel.frames
    correlation_id, response = protocol.decode_response(frame, ApiKey.ELECT_LEADERS, version)
    assert correlation_id == 7
    return response


def outcome(response):
    return {(t.topic, p.partition_id): p.error_code
            for t in response.replica_election_results for p in t.partition_result}


@pytest.mark.parametrize("version", [0, 1])
def test_preferred_election_on_the_controller(env, version):
    handler, changes = handler_of(env, 0)
    response = call(handler, version, {"t": [0, 1], "nope": [0]})
    assert getattr(response, "error_code", ErrorCode.none) == ErrorCode.none  # v1+
    assert [t.topic for t in response.replica_election_results] == ["t", "nope"]
    assert outcome(response) == {("t", 0): ErrorCode.none,
                                 ("t", 1): ErrorCode.election_not_needed,
                                 ("nope", 0): ErrorCode.unknown_topic_or_partition}
    assert changes  # the broker applies the new image before it answers
    p = env.page.read().partition("t", 0)
    assert (p.leader, p.leader_epoch) == (0, 4)


def test_null_partitions_and_unclean_election(env):
    handler, _ = handler_of(env, 0)
    response = call(handler, 1, None)
    assert outcome(response) == {("t", 0): ErrorCode.none}
    assert call(handler, 1, None).replica_election_results == ()  # nothing needed one
    response = call(handler, 1, {"t": [0]}, ElectionType.UNCLEAN)
    assert outcome(response) == {("t", 0): ErrorCode.election_not_needed}
    assert "unclean election is only for partitions without a leader" in (
        response.replica_election_results[0].partition_result[0].error_message)


def test_a_bad_election_type_fails_the_request(env):
    handler, changes = handler_of(env, 0)
    response = call(handler, 1, {"t": [0]}, election_type=5)
    assert response.error_code == ErrorCode.invalid_request
    assert outcome(response) == {("t", 0): ErrorCode.invalid_request}
    assert not changes


def test_a_broker_that_is_not_the_controller_says_so(env):
    handler_of(env, 0)  # broker 0's controller is active
    standby, changes = handler_of(env, 1)
    response = call(standby, 1, {"t": [0]})
    assert response.error_code == ErrorCode.not_controller
    assert outcome(response) == {("t", 0): ErrorCode.not_controller}
    (message,) = [p.error_message for t in response.replica_election_results
                  for p in t.partition_result]
    assert message == ("broker 1 is not the active controller; the controller is broker 0")
    response = call(standby, 1, None)
    assert (response.error_code, response.replica_election_results) == (
        ErrorCode.not_controller, ())
    assert outcome(call(standby, 0, {"t": [1]})) == {("t", 1): ErrorCode.not_controller}
    assert not changes
