"""The transaction coordinator's marker sender without processes: markers routed by the
leaders of the image — appended here for this broker's partitions, one WriteTxnMarkers
request per other leader, the answers' codes reported per marker part; a partition without
a live leader reported with no code (sent again later), a deleted one ``gone``; a leader
that cannot be reached, or whose connection is lost, reports NOT_LEADER_OR_FOLLOWER, and
is tried again only after its reconnect back-off (50 ms doubling to 1 s, jittered, reset
once connected)."""
from __future__ import annotations

import random

from cluster.errors import NotLeaderForPartitionError
from cluster.metadata.model import BrokerInfo, MetadataImage, PartitionState, TopicInfo
from replica_proc.transaction_coordinator.marker_sender import TxnMarkerSender
from replica_proc.transaction_coordinator.results import TxnMarker
from replica_proc.txn_markers_handler import MarkerResult, response
from shm_ring import PeerDiedError
from tests.support.clock import FakeClock
from tests.support.fake_connection import FakeConnection

CLUSTER = "c" * 22
ME = 0
#: topic -> its one partition's leader: "here" this broker, "there" broker 1 (alive),
#: "dead" broker 2 (not alive); "gone" is not in the image.
LEADERS = {"here": ME, "there": 1, "dead": 2}


class Metadata:
    image = MetadataImage(1, CLUSTER, 0, {0: BrokerInfo(0, 0, True), 1: BrokerInfo(1, 0, True),
                                          2: BrokerInfo(2, 0, False)},
                          {name: TopicInfo(name, name, (PartitionState(name, 0, leader, 0,
                                                                       (leader,), (leader,)),))
                           for name, leader in LEADERS.items()})


class Local:
    """This broker's WriteTxnMarkersHandler: every partition appended (code 0)."""

    def __init__(self):
        self.requests = []

    def write(self, request, respond):
        self.requests.append(request)
        respond([(m.producer_id, [(t.name, [MarkerResult(i, 0, None)
                                            for i in t.partition_indexes])
                                  for t in m.topics]) for m in request.markers])
        return True


class Leader(FakeConnection):
    """A connection to another leader that answers each marker partition with ``code``."""

    def __init__(self, code):
        super().__init__(lambda request: response([
            (m.producer_id, [(t.name, [MarkerResult(i, code, None) for i in t.partition_indexes])
                             for t in m.topics]) for m in request.markers]))


def marker(*topics, producer_id=7):
    return TxnMarker("tx", producer_id, 3, 5, True, tuple((t, 0) for t in sorted(topics)))


def sender(connector=None, clock=None, rng=None):
    reports = []
    s = TxnMarkerSender(CLUSTER, ME, Metadata(), Local(), connector,
                        clock=clock or FakeClock(100.0), rng=rng)
    return s, reports, lambda m, codes, gone: reports.append((m.partitions, codes, gone))


def test_markers_go_to_their_leaders_and_their_codes_come_back():
    leader = Leader(code=0)
    connected = []

    def connect(cluster_id, broker_id, timeout, capacity):
        connected.append((broker_id, timeout))
        return leader

    s, reports, on_done = sender(connect)
    s.send([marker("here", "there", "dead", "gone")], on_done)
    assert sorted(reports) == sorted([
        ((("gone", 0),), {}, (("gone", 0),)),  # deleted: no marker needed
        ((("dead", 0),), {}, ()),  # no live leader: sent again later
        ((("here", 0),), {("here", 0): 0}, ()),  # appended here
    ])
    assert connected == [(1, 0)]  # one attempt, never waiting
    [(_, request)] = leader.requests
    assert [(m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result,
             [(t.name, t.partition_indexes) for t in m.topics]) for m in request.markers] == [
        (7, 3, 5, True, [("there", (0,))])]
    s.poll()
    assert reports[-1] == ((("there", 0),), {("there", 0): 0}, ())
    s.close()
    assert leader.closed


def test_an_unreachable_leader_reports_not_leader():
    def refuse(cluster_id, broker_id, timeout, capacity):
        raise ConnectionRefusedError("nobody listens")

    for connector in (refuse, None):  # None: before the broker's Listener exists
        s, reports, on_done = sender(connector)
        s.send([marker("there")], on_done)
        assert reports == [((("there", 0),), {("there", 0): NotLeaderForPartitionError.errno},
                            ())]


def test_each_markers_codes_are_its_own():
    leader = Leader(code=NotLeaderForPartitionError.errno)
    s, reports, on_done = sender(lambda *a, **k: leader)
    s.send([marker("there", producer_id=7), marker("there", producer_id=8)], on_done)
    assert len(leader.requests) == 1  # one request per leader
    s.poll()
    assert reports == [((("there", 0),), {("there", 0): NotLeaderForPartitionError.errno}, ())
                       ] * 2


class FlakyLeader:
    """A connector to broker 1 that refuses while ``up`` is False (counting attempts); the
    connection it gives dies once ``up`` turns False again."""

    def __init__(self):
        self.up = False
        self.attempts = 0
        self.leader = Leader(code=0)
        send = self.leader.send

        def send_while_up(frame, timeout=None):
            if not self.up:
                raise PeerDiedError("the leader died")
            return send(frame, timeout)
        self.leader.send = send_while_up

    def __call__(self, cluster_id, broker_id, timeout, capacity):
        self.attempts += 1
        if not self.up:
            raise ConnectionRefusedError("nobody listens")
        return self.leader


def test_a_dead_leader_is_tried_again_only_after_a_growing_jittered_back_off():
    clock = FakeClock(100.0)
    connector = FlakyLeader()
    s, reports, on_done = sender(connector, clock, random.Random(1))
    waits = []
    for _ in range(8):
        attempts = connector.attempts
        s.send([marker("there")], on_done)  # the attempt fails: a back-off begins
        assert connector.attempts == attempts + 1
        wait = s.reconnect.remaining(1)
        waits.append(wait)
        due = clock.now + wait
        while clock.now + 0.01 < due:
            clock.advance(0.01)  # the coordinator retrying every 10 ms meanwhile
            s.send([marker("there")], on_done)
            assert connector.attempts == attempts + 1  # no attempt inside the back-off
        clock.now = due
    assert all(report == ((("there", 0),), {("there", 0): NotLeaderForPartitionError.errno},
                          ()) for report in reports)
    for n, wait in enumerate(waits):  # 50, 100, 200, 400, 800, 1000 ms, +-20 %, at most 1 s
        base = min(0.05 * 2 ** n, 1.0)
        assert base * 0.8 <= wait <= min(base * 1.2, 1.0)
    assert waits[-1] >= 0.8 and max(waits) <= 1.0
    assert len({round(wait / (0.05 * 2 ** n), 6) for n, wait in enumerate(waits[:4])}) > 1

    # connected: the back-off resets, so the next failure waits about 50 ms again
    connector.up = True
    s.send([marker("there")], on_done)
    s.poll()
    assert reports[-1] == ((("there", 0),), {("there", 0): 0}, ())
    assert s.reconnect.ready(1)
    connector.up = False
    attempts = connector.attempts
    s.send([marker("there")], on_done)  # the connection dies under this one
    s.send([marker("there")], on_done)  # ... and this one reconnects at once: refused
    assert connector.attempts == attempts + 1
    assert 0.04 <= s.reconnect.remaining(1) <= 0.06
    s.close()


def test_a_leader_that_died_without_answering_reports_not_leader_from_poll():
    leader = Leader(code=0)
    s, reports, on_done = sender(lambda *a, **k: leader)
    s.send([marker("there")], on_done)
    leader.answers.clear()  # it read the request and died before answering
    leader.died = True
    s.poll()
    assert reports == [((("there", 0),), {("there", 0): NotLeaderForPartitionError.errno},
                        ())]
    assert leader.closed
