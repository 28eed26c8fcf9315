"""The controller: election, the metadata log, liveness and leaders, topic admin errors.

Brokers are played by flock registrations held in this process (flock locks belong to open
file descriptions, so each registration is a broker of its own); the clock is the ``now``
the tests pass to ``poll``. One test runs two controllers in two processes and SIGKILLs
the active one.
"""
from __future__ import annotations

import os
import re
import resource
import signal
import time

import pytest

from cluster.config import BrokerConfig
from cluster.errors import KafkaStorageError, NotControllerError
from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import register_broker
from cluster.metadata.model import MetadataImage, PartitionState
from cluster.metadata.page import MetadataPage
from replica_proc.controller import metadata_log as mr
from replica_proc.controller.controller import Controller
from replica_proc.controller.metadata_copies import COPY_DIR
from replica_proc.controller.metadata_log import MetadataLog
from replica_proc.controller.placement import assign_replicas, elect
from tests.replica_proc.controller.env import Env
from tests.support.bounds import BOUND
from tests.support.processes import CTX


@pytest.fixture
def three(env):
    """Three live brokers and broker 0's controller, active."""
    for b in range(3):
        env.start_broker(b)
    controller = env.controller(0)
    env.poll(controller)
    assert controller.active
    return env, controller


def leaders(image, topic):
    return [p.leader for p in image.topics[topic].partitions]


# -- election ---------------------------------------------------------------------------------

def test_the_first_poll_elects_and_publishes_the_live_brokers(env):
    for b in range(3):
        env.start_broker(b)
    controller = env.controller(1)
    assert not controller.active and controller.image is None
    image = env.poll(controller)
    assert controller.active and controller.epoch == 1
    assert image.controller_id == 1
    assert image.live_brokers() == [0, 1, 2]
    assert {b.pid for b in image.brokers.values()} == {os.getpid()}
    assert image == controller.image
    assert image.version == 4  # controller record + three broker records


def test_only_one_controller_is_active_and_the_next_replays_the_log(env):
    for b in range(2):
        env.start_broker(b)
    first, second = env.controller(0), env.controller(1)
    env.poll(first)
    assert env.poll(second).controller_id == 0
    assert not second.active
    with pytest.raises(NotControllerError, match="broker 1 is not the active controller"):
        second.create_topics([{"name": "t"}])
    assert first.create_topics([{"name": "t", "num_partitions": 4, "configs": {
        "retention.ms": "1000"}}]) == {"t": (0, None)}
    first.delete_topics(["t"])
    first.create_topics([{"name": "t", "num_partitions": 2}, {"name": "u"}])
    first.create_partitions({"u": (3, None)})
    before = env.page.read()
    first.close()
    first.close()
    after = env.poll(second)
    assert second.active and second.epoch == 2
    assert after.controller_id == 1
    assert after.topics == before.topics
    assert after.brokers == before.brokers
    assert after.version == before.version + 1  # its controller record only


def test_poll_does_nothing_until_the_interval_has_passed(env):
    env.start_broker(0)
    env.start_broker(1)
    controller = env.controller(0)
    assert controller.poll(100.0)
    env.stop_broker(1)
    controller.poll(100.0 + controller.poll_interval / 2)
    assert env.page.read().brokers[1].alive
    controller.poll(100.0 + controller.poll_interval)
    assert not env.page.read().brokers[1].alive


def test_a_torn_tail_of_the_metadata_log_is_dropped_on_takeover(env):
    env.start_broker(0)
    controller = env.controller(0)
    env.poll(controller)
    controller.create_topics([{"name": "t", "num_partitions": 3}])
    before = env.page.read()
    controller.close()
    segment = os.path.join(env.data_dir, dd.METADATA_LOG_DIR, "0" * 20 + ".log")
    os.remove(os.path.join(env.data_dir, dd.METADATA_LOG_DIR, ".clean-shutdown"))
    with open(segment, "ab") as file:  # a controller killed in the middle of an append
        file.write(b"\x00" * 8 + b"\x00\x00\x01\x00" + b"half a batch")
    image, epoch = MetadataLog(env.data_dir).replay(env.cluster_id)
    assert (image, epoch) == (before, 1)


@pytest.mark.parametrize("damaged", [
    "json",  # inside the last record's JSON: the CRC fails
    "base offset",  # the last batch's baseOffset (outside the CRC): a gap in the offsets
    "batch length",  # the last batch's batchLength: the open's repair would cut the log
])
def test_a_damaged_batch_in_the_metadata_log_is_named_not_replayed_or_cut(env, damaged):
    """With no copy left to repair it from (``metadata_copies``), a damaged batch after a
    clean shutdown is refused, naming the file, rather than cut (forgetting what follows)."""
    env.start_broker(0)
    controller = env.controller(0)
    env.poll(controller)
    controller.create_topics([{"name": "t", "num_partitions": 3}])
    controller.close()
    copy = os.path.join(env.data_dir, "broker-0", COPY_DIR)
    os.rename(copy, copy + ".elsewhere")  # the only copy is gone
    segment = os.path.join(env.data_dir, dd.METADATA_LOG_DIR, "0" * 20 + ".log")
    with open(segment, "r+b") as file:
        data = bytearray(file.read())
        last = last_batch_position(data)  # low bytes of baseOffset, batchLength:
        position = {"json": -5, "base offset": last + 7, "batch length": last + 11}[damaged]
        data[position] ^= 0x40
        file.seek(0)
        file.write(data)
    with pytest.raises(KafkaStorageError, match=re.escape(f"metadata log {segment}: ")):
        MetadataLog(env.data_dir).replay(env.cluster_id)
    with open(segment, "rb") as file:
        assert file.read() == data  # nothing cut


def last_batch_position(data):
    """Where the last RecordBatch in ``data`` (a segment's bytes) starts."""
    position = last = 0
    while position < len(data):
        last = position
        position += 12 + int.from_bytes(data[position + 8:position + 12], "big")
    return last


def controller_process(data_dir, cluster_id, broker_id, pipe):
    """A broker's loop, reduced to its controller; answers create requests over the pipe."""
    registration = register_broker(data_dir, broker_id, cluster_id)
    registration.set_state(dd.STATE_SERVING)
    page = MetadataPage.open(cluster_id)
    controller = Controller(data_dir, cluster_id, broker_id,
                            BrokerConfig({}, data_dir=data_dir), page, poll_interval=0.01)
    while True:
        controller.poll(time.monotonic())
        if pipe.poll(0.005):
            topics = pipe.recv()
            pipe.send(controller.create_topics(topics) if controller.active else None)


def wait_page(page, predicate):
    deadline = time.monotonic() + BOUND
    while True:
        image = page.read()
        if predicate(image):
            return image
        assert time.monotonic() < deadline, f"page never satisfied the test: {image}"
        time.sleep(0.005)


@pytest.mark.multiprocess
def test_when_the_active_controller_dies_another_process_takes_over(env):
    pipes, processes = {}, {}
    try:
        for b in (0, 1):
            pipes[b], theirs = CTX.Pipe()
            processes[b] = CTX.Process(target=controller_process,
                                       args=(env.data_dir, env.cluster_id, b, theirs))
            processes[b].start()
        image = wait_page(env.page, lambda i: i.controller_id >= 0 and
                          i.live_brokers() == [0, 1])
        active = image.controller_id
        other = 1 - active
        pipes[active].send([{"name": "t", "num_partitions": 4}])
        assert pipes[active].poll(BOUND)
        assert pipes[active].recv() == {"t": (0, None)}
        pipes[other].send([{"name": "u"}])
        assert pipes[other].poll(BOUND)
        assert pipes[other].recv() is None  # not the controller
        before = env.page.read()
        assert sorted(leaders(before, "t")) == [0, 0, 1, 1]

        os.kill(processes[active].pid, signal.SIGKILL)
        processes[active].join(BOUND)
        after = wait_page(env.page, lambda i: i.controller_id == other and
                          i.live_brokers() == [other])
        assert after.version > before.version
        assert not after.brokers[active].alive
        for old, new in zip(before.topics["t"].partitions, after.topics["t"].partitions):
            assert (new.replicas, new.isr) == (old.replicas, old.isr)
            if old.leader == active:
                assert (new.leader, new.leader_epoch) == (-1, old.leader_epoch + 1)
            else:
                assert new == old
        assert after.topics["t"].topic_id == before.topics["t"].topic_id
        pipes[other].send([{"name": "u", "num_partitions": 2}])
        assert pipes[other].poll(BOUND)
        assert pipes[other].recv() == {"u": (0, None)}
        assert leaders(env.page.read(), "u") == [other, other]
    finally:
        for process in processes.values():
            if process.is_alive():
                os.kill(process.pid, signal.SIGKILL)
            process.join(BOUND)


# -- CreateTopics -----------------------------------------------------------------------------

@pytest.mark.parametrize("spec,code,words", [
    ({"name": "bad name"}, 17, "topic name 'bad name' contains ' '"),
    ({"name": "x" * 250}, 17, "is 250 characters"),
    ({"name": "."}, 17, "cannot be '.'"),
    ({"name": "t", "num_partitions": 0}, 37, "topic 't': number of partitions 0 must be"),
    ({"name": "t", "num_partitions": -2}, 37, "number of partitions -2"),
    ({"name": "t", "replication_factor": 0}, 38, "replication factor 0 must be larger than 0"),
    ({"name": "t", "replication_factor": 4}, 38,
     "replication factor 4 larger than available brokers: 3 (alive: [0, 1, 2])"),
    ({"name": "t", "configs": {"segment.bytes": "lots"}}, 40, "'segment.bytes'"),
    ({"name": "t", "configs": {"retention.ms": "-7"}}, 40, "'-7'"),
    ({"name": "t", "configs": {"no.such.config": "1"}}, 40,
     "unknown topic config 'no.such.config'"),
    ({"name": "t", "num_partitions": 2, "assignments": {0: [0]}}, 42,
     "both num_partitions (2)"),
    ({"name": "t", "assignments": {0: [0], 2: [1]}}, 39,
     "partitions of the replica assignment are [0, 2], expected a consecutive"),
    ({"name": "t", "assignments": {0: []}}, 39, "partition 0: the manual replica assignment is "
                                                "an empty replica list"),
    ({"name": "t", "assignments": {0: [1, 1]}}, 39, "[1, 1] includes broker 1 more than once"),
    ({"name": "t", "assignments": {0: [7]}}, 39,
     "includes broker 7, but no such broker is registered (known: [0, 1, 2])"),
    ({"name": "t", "assignments": {0: [0, 1], 1: [2]}}, 39,
     "partition 1: the manual replica assignment [2] has 1 replica(s), inconsistent with the "
     "topic's other partitions, which have 2"),
])
def test_create_topics_errors_name_the_bad_value(three, spec, code, words):
    env, controller = three
    before = env.page.read()
    result = controller.create_topics([spec])
    (name, (got_code, message)), = result.items()
    assert name == spec["name"]
    assert got_code == code, message
    assert words in message
    assert env.page.read() == before


def test_existing_duplicate_and_colliding_names_are_refused(three):
    env, controller = three
    assert controller.create_topics([{"name": "a.b"}]) == {"a.b": (0, None)}
    result = controller.create_topics([{"name": "a.b"}, {"name": "a_b"}, {"name": "d"},
                                       {"name": "d"}, {"name": "ok"}])
    assert result["a.b"] == (36, "topic 'a.b' already exists")
    assert result["a_b"][0] == 17 and "collides with existing topic 'a.b'" in result["a_b"][1]
    assert result["d"] == (42, "topic 'd' appears 2 times in the request; each topic may be "
                               "created once")
    assert result["ok"] == (0, None)
    assert sorted(env.page.read().topics) == ["a.b", "ok"]


def test_validate_only_checks_but_creates_nothing(three):
    env, controller = three
    before = env.page.read()
    assert controller.create_topics([{"name": "t", "num_partitions": 3}, {"name": "bad!"}],
                                    validate_only=True) == {
        "t": (0, None),
        "bad!": (17, "topic name 'bad!' contains '!': only ASCII letters, digits, '.', '_' "
                     "and '-' are allowed")}
    assert env.page.read() == before
    assert controller.create_partitions({}, validate_only=True) == {}


def test_created_topics_take_the_broker_defaults_and_keep_their_configs(env):
    for b in range(3):
        env.start_broker(b)
    controller = env.controller(0, num_partitions=5, default_replication_factor=2)
    env.poll(controller)
    result = controller.create_topics([{"name": "t", "configs": {
        "cleanup.policy": "compact", "segment.bytes": None}}])
    assert result == {"t": (0, None)}
    topic = env.page.read().topics["t"]
    assert len(topic.partitions) == 5
    assert all(len(p.replicas) == 2 and p.isr == p.replicas for p in topic.partitions)
    assert all(p.leader == p.replicas[0] and p.leader_epoch == 0 for p in topic.partitions)
    assert topic.configs == {"cleanup.policy": "compact"}  # None means "the default"
    assert len(topic.topic_id) == 22 and not topic.internal


def test_partitions_spread_evenly_and_replicas_never_share_a_broker(three):
    env, controller = three
    controller.create_topics([{"name": "one", "num_partitions": 6, "replication_factor": 1},
                              {"name": "three", "num_partitions": 9, "replication_factor": 3}])
    image = env.page.read()
    assert sorted(leaders(image, "one")) == [0, 0, 1, 1, 2, 2]
    assert sorted(leaders(image, "three")) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert all(sorted(p.replicas) == [0, 1, 2] for p in image.topics["three"].partitions)


def test_single_partition_topics_rotate_over_the_brokers(three):
    env, controller = three
    for name in "abc":
        controller.create_topics([{"name": name, "num_partitions": 1}])
    image = env.page.read()
    assert sorted(leaders(image, n)[0] for n in "abc") == [0, 1, 2]


def test_manual_assignment_uses_live_replicas_for_isr_and_leader(three):
    env, controller = three
    env.stop_broker(2)
    env.poll(controller)
    assert controller.create_topics([{"name": "m", "assignments": {0: [2, 1], 1: [0, 2]}}]) \
        == {"m": (0, None)}
    parts = env.page.read().topics["m"].partitions
    assert [(p.replicas, p.isr, p.leader) for p in parts] == [
        ((2, 1), (1,), 1), ((0, 2), (0,), 0)]
    result = controller.create_topics([{"name": "n", "assignments": {0: [2]}}])
    assert result["n"] == (39, "topic 'n' partition 0: none of the brokers of the manual "
                               "replica assignment [2] is alive")


def test_a_topic_too_large_for_the_page_is_refused(tmp_path):
    env = Env(tmp_path, page_size=8192)
    try:
        env.start_broker(0)
        controller = env.controller(0)
        env.poll(controller)
        before = env.page.read()
        (code, message), = controller.create_topics(
            [{"name": "big", "num_partitions": 1000}]).values()
        assert code == 37
        assert "topic 'big': the metadata image would be" in message
        assert "more than the 7936 the metadata page holds" in message
        assert env.page.read() == before
    finally:
        env.close()


# -- Kafka's assignment -------------------------------------------------------------------------

def test_assignment_is_kafkas_round_robin_with_shifted_followers():
    # The example in Kafka's AdminUtils: 5 brokers, 10 partitions, 3 replicas, start 0.
    assignment = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0)
    assert assignment[:5] == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1]]
    assert assignment[5:] == [[0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2]]


def test_assignment_from_a_start_index_and_partition_and_its_bounds():
    assert assign_replicas([3, 5, 9], 3, 1, start_index=2) == [[9], [3], [5]]
    assert assign_replicas([0, 1, 2], 2, 2, start_index=0, start_partition=3) == [
        [0, 2], [1, 0]]
    with pytest.raises(ValueError, match=r"replication factor 3 must be in \[1, 2\]"):
        assign_replicas([0, 1], 1, 3, start_index=0)


# -- liveness and leaders -----------------------------------------------------------------------

def test_a_lost_broker_takes_its_partitions_offline_and_back_with_epoch_bumps(three):
    env, controller = three
    controller.create_topics([{"name": "t", "num_partitions": 3}])
    start = env.page.read().topics["t"].partitions
    lost = next(p for p in start if p.leader == 1)
    env.stop_broker(1)
    image = env.poll(controller)
    assert not image.brokers[1].alive and image.live_brokers() == [0, 2]
    offline = image.partition("t", lost.partition)
    assert (offline.leader, offline.leader_epoch, offline.isr) == (-1, 1, (1,))
    assert all(image.partition("t", p.partition) == p for p in start if p is not lost)
    assert image.partitions_led_by(1) == []

    env.start_broker(1, state=dd.STATE_STARTING)
    assert env.poll(controller).partition("t", lost.partition).leader == -1  # not serving yet
    env.brokers[1].set_state(dd.STATE_SERVING)
    image = env.poll(controller)
    back = image.partition("t", lost.partition)
    assert (back.leader, back.leader_epoch, back.isr) == (1, 2, (1,))
    assert image.brokers[1].alive

    env.brokers[1].set_state(dd.STATE_STOPPING)  # a broker shutting down leads nothing
    assert env.poll(controller).partition("t", lost.partition).leader_epoch == 3


def test_a_broker_not_yet_serving_is_not_listed(env):
    env.start_broker(0)
    env.start_broker(1, state=dd.STATE_STARTING)
    controller = env.controller(0)
    assert sorted(env.poll(controller).brokers) == [0]
    with open(os.path.join(dd.broker_dir(env.data_dir, 1), dd.BROKER_JSON), "w") as f:
        f.write("{not json")
    assert sorted(env.poll(controller).brokers) == [0]


def test_leaders_come_from_the_live_isr_and_unclean_election_is_per_topic(three):
    env, controller = three
    env.stop_broker(1)
    env.poll(controller)
    controller.create_topics([
        {"name": "clean", "assignments": {0: [0, 1]}},
        {"name": "dirty", "assignments": {0: [0, 1]},
         "configs": {"unclean.leader.election.enable": "true"}}])
    env.start_broker(1)
    image = env.poll(controller)
    for name in ("clean", "dirty"):  # the ISR of a new partition: its live replicas
        p = image.partition(name, 0)
        assert (p.leader, p.leader_epoch, p.replicas, p.isr) == (0, 0, (0, 1), (0,))
    env.stop_broker(0)
    image = env.poll(controller)
    clean, dirty = image.partition("clean", 0), image.partition("dirty", 0)
    assert (clean.leader, clean.leader_epoch, clean.isr) == (-1, 1, (0,))  # the ISR member stays
    assert (dirty.leader, dirty.leader_epoch, dirty.isr) == (1, 1, (1,))  # may lose records
    env.start_broker(0)
    image = env.poll(controller)
    clean = image.partition("clean", 0)
    assert (clean.leader, clean.leader_epoch, clean.isr) == (0, 2, (0,))
    assert image.partition("dirty", 0) == dirty  # its leader is alive and in its ISR
    env.stop_broker(1)
    image = env.poll(controller)
    dirty = image.partition("dirty", 0)
    assert (dirty.leader, dirty.leader_epoch, dirty.isr) == (0, 2, (0,))
    assert image.partition("clean", 0) == clean


def test_elect_keeps_a_live_leader_and_shrinks_the_isr():
    state = PartitionState("t", 0, 1, 4, (0, 1, 2), (0, 1, 2), partition_epoch=7)
    assert elect(state, {0, 1, 2}) is state
    assert elect(state, {1, 2}) == PartitionState("t", 0, 1, 4, (0, 1, 2), (1, 2), 8)
    assert elect(state, {0, 2}) == PartitionState("t", 0, 0, 5, (0, 1, 2), (0, 2), 8)
    assert elect(state, set()) == PartitionState("t", 0, -1, 5, (0, 1, 2), (1,), 8)


def test_partition_epochs_survive_the_log_and_old_records_replay_as_zero(env):
    topic = mr.topic_record("t", "id", {})
    old = {"type": "partition", "topic": "t", "partition": 0, "leader": 0,
           "leader_epoch": 2, "replicas": [0, 1], "isr": [0]}
    new = mr.partition_record(PartitionState("t", 1, 1, 3, (1, 0), (1, 0), 9))
    metadata_log = MetadataLog(env.data_dir)
    metadata_log.append([topic, old, new], 1)
    image, _ = metadata_log.replay("c")
    metadata_log.close()
    assert [p.partition_epoch for p in image.topics["t"].partitions] == [0, 9]
    assert MetadataImage.from_json(image.to_json()) == image


# -- DeleteTopics and CreatePartitions -----------------------------------------------------------

def test_delete_topics(three):
    env, controller = three
    controller.create_topics([{"name": "a"}, {"name": "b"}])
    assert controller.delete_topics(["a", "nope", "b", "b"]) == {
        "a": (0, None), "nope": (3, "topic 'nope' does not exist"),
        "b": (42, "topic 'b' appears 2 times in the request; each topic may be deleted once")}
    assert sorted(env.page.read().topics) == ["b"]
    assert controller.create_topics([{"name": "a"}]) == {"a": (0, None)}  # a new topic id
    deleted = env.page.read().deleted_topic_ids
    assert len(deleted) == 1 and env.page.read().topics["a"].topic_id not in deleted


def test_delete_topics_disabled(env):
    env.start_broker(0)
    controller = env.controller(0, delete_topic_enable=False)
    env.poll(controller)
    controller.create_topics([{"name": "a"}])
    assert controller.delete_topics(["a"]) == {"a": (73, "topic 'a' was not deleted: topic "
                                                         "deletion is disabled "
                                                         "(delete.topic.enable=false)")}
    assert "a" in env.page.read().topics


def test_create_partitions_grows_topics_and_names_bad_counts(three):
    env, controller = three
    controller.create_topics([{"name": "t", "num_partitions": 3, "replication_factor": 2}])
    before = env.page.read()
    result = controller.create_partitions({
        "t": (6, None), "nope": (2, None)})
    assert result == {"t": (0, None), "nope": (3, "topic 'nope' does not exist")}
    parts = env.page.read().topics["t"].partitions
    assert parts[:3] == before.topics["t"].partitions
    assert sorted(p.leader for p in parts) == [0, 0, 1, 1, 2, 2]
    assert all(len(set(p.replicas)) == 2 for p in parts)
    result = controller.create_partitions({"t": (5, None)})
    assert result == {"t": (37, "topic 't' currently has 6 partitions, which is higher than "
                                "the requested 5")}
    assert controller.create_partitions({"t": (6, None)}) == {
        "t": (37, "topic 't' already has 6 partitions")}
    assert controller.create_partitions({"t": (8, [[0, 1]])}) == {
        "t": (39, "topic 't': increasing the number of partitions by 2 but 1 assignment(s) "
                  "were given")}
    (code, message), = controller.create_partitions({"t": (7, [[0]])}).values()
    assert code == 39 and "[0] has 1 replica(s), inconsistent" in message
    assert controller.create_partitions({"t": (7, [[2, 0]])}, validate_only=True) == {
        "t": (0, None)}
    assert len(env.page.read().topics["t"].partitions) == 6
    assert controller.create_partitions({"t": (7, [[2, 0]])}) == {"t": (0, None)}
    assert env.page.read().partition("t", 6).replicas == (2, 0)
    env.stop_broker(1)
    env.stop_broker(2)
    env.poll(controller)
    (code, message), = controller.create_partitions({"t": (8, None)}).values()
    assert code == 38 and "replication factor 2 larger than available brokers: 1" in message


def test_the_log_replays_to_the_published_image(three):
    env, controller = three
    controller.create_topics([{"name": "t", "num_partitions": 4}, {"name": "u"}])
    controller.create_partitions({"u": (3, None)})
    controller.delete_topics(["t"])
    env.stop_broker(2)
    env.poll(controller)
    published = env.page.read()
    controller.close()
    image, epoch = MetadataLog(env.data_dir).replay(env.cluster_id)
    assert image == published and epoch == 1


@pytest.mark.parametrize("records,words", [
    ([{"type": "partition", "topic": "nope", "partition": 0, "leader": 0, "leader_epoch": 0,
       "replicas": [0], "isr": [0]}], "no topic 'nope'"),
    ([mr.topic_record("t", "id", {}),
      {"type": "partition", "topic": "t", "partition": 1, "leader": 0, "leader_epoch": 0,
       "replicas": [0], "isr": [0]}], "topic 't' has 0 partitions, expected partition <= 0"),
    ([{"type": "wormhole"}], "unknown metadata record type 'wormhole'"),
])
def test_records_that_do_not_fit_the_image_are_refused(records, words):
    with pytest.raises(ValueError, match=words):
        mr.apply(MetadataImage.empty("c"), records, 1)


def test_records_are_keyed_by_entity():
    assert [mr.record_key(r) for r in (
        mr.controller_record(1, 2), mr.remove_topic_record("t"),
        mr.partition_record(PartitionState("t", 3, 0, 0, (0,), (0,))))] == [
        "controller", "topic/t", "partition/t/3"]
    with pytest.raises(ValueError, match="unknown metadata record type 'wormhole'"):
        mr.record_key({"type": "wormhole"})


# -- partitions per broker --------------------------------------------------------------------

def test_more_partitions_per_broker_than_the_limit_are_refused_and_nothing_created(env):
    for b in range(2):
        env.start_broker(b)
    controller = env.controller(0, **{"ringlog.max.partitions.per.broker": 10})
    env.poll(controller)
    assert controller.create_topics([{"name": "a", "num_partitions": 8}])["a"] == (0, None)
    before = env.page.read()
    (code, message), = controller.create_topics([{"name": "big", "num_partitions": 14}]).values()
    assert (code, message) == (44, "topic 'big': broker 0 would host 11 partition replicas, "
                                   "more than ringlog.max.partitions.per.broker 10 "
                                   "(configured)")
    code, message = controller.create_partitions({"a": (30, None)})["a"]
    assert code == 44 and "broker 0 would host 15 partition replicas" in message
    assert env.page.read() == before
    # Up to the limit is fine, and an auto-creation (num.partitions) obeys it too.
    assert controller.create_partitions({"a": (20, None)})["a"] == (0, None)
    assert controller.create_topics([{"name": "auto"}])["auto"][0] == 44


def test_the_default_limit_is_derived_from_rlimit_nofile(env):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    env.start_broker(0)
    controller = env.controller(0)
    env.poll(controller)
    resource.setrlimit(resource.RLIMIT_NOFILE, (300, hard))
    try:
        (code, message), = controller.create_topics(
            [{"name": "huge", "num_partitions": 301}]).values()
        assert controller.create_topics([{"name": "fits", "num_partitions": 300}])["fits"] == (
            0, None)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert code == 44
    assert message == ("topic 'huge': broker 0 would host 301 partition replicas, more than "
                       "ringlog.max.partitions.per.broker 300 (derived from RLIMIT_NOFILE 300)")
    assert "huge" not in env.page.read().topics
