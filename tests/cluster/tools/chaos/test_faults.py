"""The fault injector against fake brokers and a fixed metadata image: which broker each
scenario hits, in what order, and what it records."""
from __future__ import annotations

import threading

import pytest

from cluster.metadata.model import NO_LEADER, MetadataImage, PartitionState, TopicInfo
from cluster.tools.chaos.brokers import Brokers
from cluster.tools.chaos.faults import FaultInjector
from cluster.tools.chaos.history import read_lines
from cluster.tools.chaos.schedule import FaultStep
from cluster.tools.chaos.workload import HistoryWriter
from tests.cluster.tools.chaos.test_files import write_log
from tests.segments.helpers import simple_batch

TOPIC = "t"


class FakeBrokers(Brokers):
    """Brokers 0..2 as pids 100..102; every action is appended to ``calls``."""

    def __init__(self):
        super().__init__([0, 1, 2])
        self.running = {0: 100, 1: 101, 2: 102}
        self.calls = []

    def pids(self):
        return dict(self.running)

    def kill(self, broker_id):
        self.calls.append(("kill", broker_id))
        return self.running.pop(broker_id, None)

    def terminate(self, broker_id, timeout=0):
        self.calls.append(("terminate", broker_id))
        return self.running.pop(broker_id, None)

    def start(self, broker_id):
        self.calls.append(("start", broker_id))
        self.running[broker_id] = 200 + broker_id
        return self.running[broker_id]

    def pause(self, broker_id):
        self.calls.append(("pause", broker_id))
        return self.running.get(broker_id)

    def resume(self, broker_id):
        self.calls.append(("resume", broker_id))
        return self.running.get(broker_id)


def image(partitions):
    """A metadata image of TOPIC with ``partitions``: [(leader, replicas)]."""
    states = tuple(PartitionState(TOPIC, n, leader, 0, tuple(replicas), tuple(replicas))
                   for n, (leader, replicas) in enumerate(partitions))
    return MetadataImage(1, "c", 0, {}, {TOPIC: TopicInfo(TOPIC, "id", states)})


class Injector(FaultInjector):
    def _fetch_wait(self, broker_id):  # no broker to ask: the fake followers park no fetch
        self.brokers.calls.append(("fetch-wait", broker_id))
        return 0.0

    def _write_divergent(self, step):
        self.brokers.calls.append(("write", step.partition))
        return {"acknowledged": [0, 1], "error": None}


def play(tmp_path, scenario, partitions, partition=0, pick=0.0):
    brokers = FakeBrokers()
    log = HistoryWriter(tmp_path / "faults.jsonl")
    step = FaultStep(0, 0.0, scenario, partition, 0 if scenario == "rolling-sigterm" else -1,
                     pick, 0.0)
    injector = Injector((step,), brokers, lambda: image(partitions), TOPIC,
                        str(tmp_path), log)
    injector.run(threading.Event())
    log.close()
    assert injector.error is None
    return brokers.calls, [e["fault"] for e in read_lines(tmp_path / "faults.jsonl")]


#: partition 0 led by 1, followers 2 then 0 (replica order); partition 1 led by 2
RF3 = [(1, [1, 2, 0]), (2, [2, 0, 1])]


@pytest.mark.parametrize("scenario, calls", [
    ("leader-kill-storm", [("kill", 1), ("start", 1)]),
    ("rolling-sigterm", [("terminate", 0), ("start", 0)]),
    ("sigstop-leader", [("pause", 1), ("resume", 1)]),
    ("sigstop-follower", [("pause", 0), ("resume", 0)]),
    ("divergence", [("fetch-wait", 2), ("fetch-wait", 0), ("pause", 2), ("pause", 0),
                    ("write", 0), ("kill", 1), ("resume", 2), ("resume", 0), ("start", 1)]),
    ("unclean-election-on", [("kill", 2), ("kill", 0), ("kill", 1), ("start", 2),
                             ("start", 0), ("start", 1)]),
])
def test_each_scenario_hits_the_partition_s_brokers_in_order(tmp_path, scenario, calls):
    assert play(tmp_path, scenario, RF3)[0] == calls


def test_a_follower_is_chosen_by_the_steps_pick(tmp_path):
    assert play(tmp_path, "sigstop-follower", RF3, pick=0.9)[0] == [("pause", 2), ("resume", 2)]


def test_a_step_without_a_target_is_recorded_as_skipped(tmp_path):
    calls, faults = play(tmp_path, "sigstop-follower", [(1, [1])])
    assert calls == [] and faults == ["skipped"]
    (tmp_path / "faults.jsonl").unlink()
    calls, faults = play(tmp_path, "sigstop-leader", [(NO_LEADER, [1])])
    assert calls == [] and faults == ["skipped"]


def test_an_offline_partition_s_kill_goes_to_a_live_broker_chosen_by_pick(tmp_path):
    calls, faults = play(tmp_path, "leader-kill-storm", [(NO_LEADER, [1])], pick=0.5)
    assert calls == [("kill", 1), ("start", 1)] and faults == ["kill", "start"]


def test_a_stop_before_the_first_step_does_nothing(tmp_path):
    brokers = FakeBrokers()
    log = HistoryWriter(tmp_path / "faults.jsonl")
    stop = threading.Event()
    stop.set()
    step = FaultStep(0, 5.0, "leader-kill-storm", 0, -1, 0.0, 1.0)
    FaultInjector((step,), brokers, lambda: image(RF3), TOPIC, str(tmp_path), log).run(stop)
    log.close()
    assert brokers.calls == []


def test_divergent_writes_that_fail_leave_no_follower_stopped(tmp_path):
    class Failing(Injector):
        def _write_divergent(self, step):
            raise ConnectionError("no broker can be reached")

    brokers = FakeBrokers()
    log = HistoryWriter(tmp_path / "faults.jsonl")
    step = FaultStep(0, 0.0, "divergence", 0, -1, 0.0, 0.0)
    injector = Failing((step,), brokers, lambda: image(RF3), TOPIC, str(tmp_path), log)
    injector.run(threading.Event())
    log.close()
    assert isinstance(injector.error, ConnectionError)
    assert brokers.calls[2:] == [("pause", 2), ("pause", 0), ("resume", 2), ("resume", 0)]


def test_an_unclean_election_step_ends_once_the_isr_is_full_again(tmp_path):
    """Once the old leader is back its partition's ISR fills (after a few looks at the
    page) and the step ends; an ISR that never fills ends the step after ISR_WAIT,
    recorded as not full."""
    shrunk = MetadataImage(1, "c", 0, {}, {TOPIC: TopicInfo(TOPIC, "id", (
        PartitionState(TOPIC, 0, 1, 0, (1, 2, 0), (1,)),))})
    for rejoins, full in ((True, True), (False, False)):
        brokers = FakeBrokers()
        looks_since_restart = []

        def metadata(brokers=brokers, looks=looks_since_restart, rejoins=rejoins):
            if ("start", 1) in brokers.calls:  # the old leader is back
                looks.append(1)
                if rejoins and len(looks) > 3:
                    return image(RF3)
            return shrunk

        ticks = iter(range(10_000))
        log = HistoryWriter(tmp_path / f"faults-{full}.jsonl")
        step = FaultStep(0, 0.0, "unclean-election-on", 0, -1, 0.0, 0.0)
        injector = Injector((step,), brokers, metadata, TOPIC, str(tmp_path), log,
                            clock=lambda ticks=ticks: float(next(ticks)))
        injector.run(threading.Event())
        log.close()
        assert injector.error is None
        events = read_lines(tmp_path / f"faults-{full}.jsonl")
        assert events[-1]["fault"] == "isr" and events[-1]["full"] is full
        assert len(looks_since_restart) > 3


@pytest.mark.parametrize("scenario, broker, suffix, calls", [
    ("segment-flip-follower", 0, ".log", [("kill", 0), ("start", 0)]),
    ("segment-flip-leader", 1, ".log", [("kill", 1), ("kill", 0), ("kill", 2),
                                        ("start", 1), ("start", 0), ("start", 2)]),
    ("txnindex-flip", 1, ".txnindex", [("kill", 1), ("start", 1)])])
def test_a_flip_step_damages_the_target_s_file_then_kills_and_restarts_it(
        tmp_path, scenario, broker, suffix, calls):
    """Partition 0 is led by 1, its followers 2 and 0 (pick 0.0: broker 0); the flipped
    file is that broker's, the broker then SIGKILLed and started (the leader's flip:
    every replica of the partition)."""
    directory = tmp_path / f"broker-{broker}" / f"{TOPIC}-0"
    directory.mkdir(parents=True)
    name = "00000000000000000000" + suffix
    if suffix == ".log":
        write_log(directory, [simple_batch(3) for _ in range(3)])
    else:
        (directory / name).write_bytes(bytes(34))
    before = (directory / name).read_bytes()
    found, events = play(tmp_path, scenario, RF3)
    assert found == calls
    assert events == ["flip"] + [name for name, _broker in calls]
    flip = read_lines(tmp_path / "faults.jsonl")[0]
    assert flip["broker"] == broker and flip["file"] == f"broker-{broker}/{TOPIC}-0/{name}"
    after = (directory / name).read_bytes()
    assert [i for i in range(len(after)) if after[i] != before[i]] == [flip["position"]]


def test_a_flip_step_without_a_file_to_damage_is_skipped(tmp_path):
    calls, events = play(tmp_path, "txnindex-flip", RF3)
    assert calls == [] and events == ["skipped"]
