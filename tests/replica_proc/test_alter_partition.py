"""AlterPartition on the broker: the controller's handler, and the leader's sender
(``AlterPartitionManager``) calling a local controller or a remote one through a channel
that the tests play (answers, lost connections, a broker that is not the controller).

The controller is a real one over a data directory, with brokers played by flock
registrations (``tests/replica_proc/controller/env.py``); the rings are exercised in
test_process.py."""
from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from cluster.metadata import data_dir as dd
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.alter_partition_handler import AlterPartitionHandler
from replica_proc.alter_partition_manager import RETRY_BACKOFF_MAX, AlterPartitionManager
from replica_proc.controller.controller import IsrChange
from tests.replica_proc.controller.env import Env


@pytest.fixture
def world(tmp_path):
    """Brokers 0-2 alive, broker 0's controller active, topics t and u (RF 3) whose
    partitions' ISRs are their leaders alone."""
    env = Env(tmp_path)
    try:
        for b in range(3):
            env.start_broker(b)
        controller = env.controller(0)
        env.poll(controller)
        assert controller.create_topics([
            {"name": "t", "num_partitions": 3, "replication_factor": 3},
            {"name": "u", "num_partitions": 1, "replication_factor": 3}]) == {
            "t": (0, None), "u": (0, None)}
        states = [s for info in controller.image.topics.values() for s in info.partitions]
        for s in states:
            assert controller.alter_partition(s.leader, [IsrChange(
                s.topic, s.partition, s.leader_epoch, s.partition_epoch, (s.leader,))])[
                (s.topic, s.partition)][0] == 0
        yield env, controller
    finally:
        env.close()


class Metadata:
    """BrokerMetadata as the manager uses it: the image on the page."""

    def __init__(self, page):
        self.page = page

    @property
    def image(self):
        return self.page.read()


class Recorder:
    """A callback that keeps what it was called with."""

    def __init__(self):
        self.calls = []

    def __call__(self, code, state):
        self.calls.append((code, state))


class Frames:
    """A Channel that keeps the frames sent on it."""

    def __init__(self):
        self.frames = []

    def send(self, frame):
        self.frames.append(bytes(frame))


def request_v(version, broker_id, entries):
    """An AlterPartitionRequest of ``version``; entries (topic id, partition, leader epoch,
    partition epoch, isr)."""
    m = protocol.request_module(ApiKey.ALTER_PARTITION, version)

    def partition(index, leader_epoch, partition_epoch, isr):
        if version >= 3:
            return m.PartitionData(partition_index=index, leader_epoch=leader_epoch,
                                   partition_epoch=partition_epoch, new_isr_with_epochs=tuple(
                                       m.BrokerState(broker_id=b) for b in isr))
        return m.PartitionData(partition_index=index, leader_epoch=leader_epoch,
                               partition_epoch=partition_epoch, new_isr=tuple(isr))
    return m.AlterPartitionRequest(broker_id=broker_id, topics=tuple(
        m.TopicData(topic_id=topic_id, partitions=(partition(*rest),))
        for topic_id, *rest in entries))


def topic_uuid(controller, name):
    return dd.uuid_of(controller.image.topics[name].topic_id)


# -- the handler --------------------------------------------------------------------------------

@pytest.mark.parametrize("version", [2, 3])
def test_the_handler_applies_a_change_and_answers_each_partitions_state(world, version):
    env, controller = world
    refreshed = []
    handler = AlterPartitionHandler(controller, lambda: refreshed.append(True))
    state = controller.image.partition("t", 0)
    unknown = dd.uuid_of(dd.new_uuid())
    request = request_v(version, state.leader, [
        (topic_uuid(controller, "t"), 0, state.leader_epoch, state.partition_epoch,
         state.replicas),
        (unknown, 0, 0, 0, (0,)),
        (topic_uuid(controller, "t"), 1, 99, 0, (0,))])
    channel = Frames()
    header = protocol.decode_request(protocol.encode_request(request, 5, "broker-x"))[0]
    handler(channel, header, request)
    correlation_id, response = protocol.decode_response(channel.frames[0],
                                                        ApiKey.ALTER_PARTITION, version)
    assert correlation_id == 5 and response.error_code == ErrorCode.none
    changed, missing, fenced = (t.partitions[0] for t in response.topics)
    assert (changed.error_code, changed.leader_id, changed.leader_epoch, changed.isr,
            changed.partition_epoch) == (ErrorCode.none, state.leader, state.leader_epoch,
                                         state.replicas, state.partition_epoch + 1)
    assert env.page.read().partition("t", 0).isr == state.replicas
    assert missing.error_code == ErrorCode.unknown_topic_id and missing.leader_id == -1
    assert fenced.error_code == ErrorCode.fenced_leader_epoch
    assert refreshed == [True]


def test_a_broker_that_is_not_the_controller_answers_not_controller(world):
    env, controller = world
    standby = env.controller(1)
    env.poll(standby)
    m = protocol.response_module(ApiKey.ALTER_PARTITION, 3)
    for candidate in (standby, None):
        response = AlterPartitionHandler(candidate, list).answer(
            m, request_v(3, 0, [(topic_uuid(controller, "t"), 0, 0, 0, (0,))]))
        assert (response.error_code, response.topics) == (ErrorCode.not_controller, ())


# -- the sender, local controller ---------------------------------------------------------------

def test_the_controller_broker_applies_its_own_changes_at_once(world):
    env, controller = world
    refreshed = []
    manager = AlterPartitionManager(0, Metadata(env.page), controller, channel=None,
                                    on_metadata_change=lambda: refreshed.append(True),
                                    clock=lambda: env.now)
    state = controller.image.partition("t", 0)
    done = Recorder()
    assert manager.submit("t", 0, state.leader_epoch, state.partition_epoch, state.replicas,
                          done)
    assert not manager.submit("t", 0, state.leader_epoch, state.partition_epoch,
                              state.replicas, done)  # one change per partition at a time
    assert manager.busy and done.calls == []
    manager.poll()
    assert done.calls == [(0, env.page.read().partition("t", 0))]
    assert done.calls[0][1].isr == state.replicas and refreshed == [True]
    assert not manager.busy
    again = Recorder()
    assert manager.submit("t", 0, state.leader_epoch, state.partition_epoch, state.replicas,
                          again)
    manager.poll()
    assert again.calls == [(95, None)]  # INVALID_UPDATE_VERSION: its epoch is stale now


# -- the sender, remote controller ---------------------------------------------------------------

class RemoteChannel:
    """ControllerChannel as the manager uses it, played by the test: ``send`` keeps the
    request (or refuses while ``up`` is False); the test answers it with ``answer``."""

    def __init__(self, controller):
        self.controller = controller
        self.up = True
        self.sent = []  # (controller id, request, on_answer)

    def send(self, controller_id, request, on_answer):
        if not self.up:
            return False
        self.sent.append((controller_id, request, on_answer))
        return True

    def answer(self, handler_controller=None, lost=False):
        """Answer the oldest request: lost (None), or the handler of the given controller
        (the test's own by default)."""
        _, request, on_answer = self.sent.pop(0)
        if lost:
            on_answer(None)
            return
        m = protocol.response_module(ApiKey.ALTER_PARTITION, request.__version__)
        on_answer(AlterPartitionHandler(handler_controller or self.controller, list)
                  .answer(m, request))


@pytest.fixture
def remote(world):
    """A manager of a broker that is not the controller, its channel and clock."""
    env, controller = world
    channel = RemoteChannel(controller)
    clock = [0.0]
    leaders = [s.leader for info in controller.image.topics.values() for s in info.partitions]
    busiest = max(set(leaders), key=leaders.count)
    manager = AlterPartitionManager(busiest, Metadata(env.page), None, channel, list,
                                    lambda: clock[0])
    return env, controller, manager, channel, clock


def leader_partitions(controller, leader):
    return [s for info in controller.image.topics.values() for s in info.partitions
            if s.leader == leader]


def test_pending_changes_go_as_one_request_one_at_a_time(remote):
    env, controller, manager, channel, _ = remote
    first, *more = leader_partitions(controller, manager.broker_id)
    assert more, "the leader leads more than one partition"
    calls = {}
    for state in (first, *more):
        calls[state.topic, state.partition] = Recorder()
        assert manager.submit(state.topic, state.partition, state.leader_epoch,
                              state.partition_epoch, state.replicas,
                              calls[state.topic, state.partition])
    manager.poll()
    assert len(channel.sent) == 1
    controller_id, request, _ = channel.sent[0]
    assert controller_id == controller.image.controller_id == 0
    assert request.broker_id == manager.broker_id
    assert sorted(p.partition_index for t in request.topics for p in t.partitions) == sorted(
        s.partition for s in (first, *more))
    manager.poll()
    assert len(channel.sent) == 1  # nothing new while one is in flight
    channel.answer()
    manager.poll()
    for (topic, partition), recorder in calls.items():
        state = env.page.read().partition(topic, partition)
        assert recorder.calls == [(0, state)] and len(state.isr) == 3


def test_not_controller_and_lost_connections_are_sent_again_after_the_backoff(remote):
    env, controller, manager, channel, clock = remote
    state = leader_partitions(controller, manager.broker_id)[0]
    done = Recorder()
    manager.submit(state.topic, state.partition, state.leader_epoch, state.partition_epoch,
                   state.replicas, done)
    manager.poll()
    standby = env.controller(1)
    env.poll(standby)
    channel.answer(handler_controller=standby)  # NOT_CONTROLLER
    manager.poll()
    assert channel.sent == [] and done.calls == []
    clock[0] += RETRY_BACKOFF_MAX
    manager.poll()
    assert len(channel.sent) == 1
    channel.answer(lost=True)
    manager.poll()
    assert channel.sent == [] and done.calls == []
    channel.up = False  # no controller reachable: kept, tried again later
    clock[0] += RETRY_BACKOFF_MAX
    manager.poll()
    assert done.calls == [] and manager.busy
    attempts = []
    channel.send = lambda *args: attempts.append(args) and False
    for _ in range(50):  # failures in a row back off up to RETRY_BACKOFF_MAX, no further
        clock[0] += RETRY_BACKOFF_MAX / 10
        manager.poll()
    assert 4 <= len(attempts) <= 6
    del channel.send
    channel.up = True
    clock[0] += RETRY_BACKOFF_MAX
    manager.poll()
    channel.answer()
    manager.poll()
    assert done.calls == [(0, env.page.read().partition(state.topic, state.partition))]


def test_a_change_the_controller_already_applied_comes_back_stale(remote):
    """The answer was lost after the controller applied it: sent again, it is stale."""
    env, controller, manager, channel, clock = remote
    state = leader_partitions(controller, manager.broker_id)[0]
    done = Recorder()
    manager.submit(state.topic, state.partition, state.leader_epoch, state.partition_epoch,
                   state.replicas, done)
    manager.poll()
    _, request, on_answer = channel.sent[0]
    m = protocol.response_module(ApiKey.ALTER_PARTITION, request.__version__)
    AlterPartitionHandler(controller, list).answer(m, request)  # applied, answer lost
    channel.sent.clear()
    on_answer(None)
    manager.poll()  # put back, to be sent after the backoff
    clock[0] += RETRY_BACKOFF_MAX
    manager.poll()
    channel.answer()
    manager.poll()
    assert done.calls == [(95, None)]


def test_a_deleted_topic_is_unknown_without_asking(remote):
    env, controller, manager, channel, _ = remote
    state = leader_partitions(controller, manager.broker_id)[0]
    controller.delete_topics([state.topic])
    done = Recorder()
    manager.submit(state.topic, state.partition, 0, 0, (manager.broker_id,), done)
    manager.poll()
    assert done.calls == [(3, None)] and channel.sent == []
