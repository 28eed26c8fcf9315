"""The transaction coordinator's marker sender without processes: markers routed by the
leaders of the image — appended here for this broker's partitions, one WriteTxnMarkers
request per other leader, the answers' codes reported per marker part; a partition without
a live leader reported with no code (sent again later), a deleted one ``gone``; a leader
that cannot be reached, or whose connection is lost, reports NOT_LEADER_OR_FOLLOWER."""
from __future__ import annotations

from cluster.errors import NotLeaderForPartitionError
from cluster.metadata.model import BrokerInfo, MetadataImage, PartitionState, TopicInfo
from cluster.protocol import frames as protocol
from replica_proc.transaction_coordinator.results import TxnMarker
from replica_proc.txn_marker_sender import TxnMarkerSender
from replica_proc.txn_markers_handler import MarkerResult, response
from shm_ring import PeerDiedError

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


class Leader:
    """A connection to another leader that answers each marker partition with ``code``."""

    def __init__(self, code):
        self.code = code
        self.requests = []
        self.answers = []
        self.closed = False
        self.died = False  # the leader's process is gone (what ``check`` looks at)

    def check(self):
        if self.died:
            raise PeerDiedError("broker 1 died")

    def send(self, frame, timeout=None):
        header, request = protocol.decode_request(frame)
        self.requests.append(request)
        answer = response([(m.producer_id, [(t.name, [MarkerResult(i, self.code, None)
                                                      for i in t.partition_indexes])
                                            for t in m.topics]) for m in request.markers])
        self.answers.append(protocol.encode_response(answer, header.correlation_id))
        return True

    def recv(self, timeout=None):
        return self.answers.pop(0) if self.answers else None

    def release(self):
        pass

    def close(self):
        self.closed = True


def marker(*topics, producer_id=7):
    return TxnMarker("tx", producer_id, 3, 5, True, tuple((t, 0) for t in sorted(topics)))


def sender(connector=None):
    reports = []
    s = TxnMarkerSender(CLUSTER, ME, Metadata(), Local(), connector)
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
    [request] = leader.requests
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
