"""A broker's request handling in the test process, for the broker tests that need no
process: ``HandlerEnv`` is a ``RequestHandler`` over real logs (a ReplicaManager in the
test's directory), driven by encoded request frames on fake connections (``ConnStub``),
with fake clocks (``clock``: the loop's monotonic seconds; ``wall``: milliseconds), a
fake AlterPartition channel that keeps the proposals (``alter``) and a metadata source the
test publishes images to (``publish_topic``). Tests that need the broker as a process use
``tests.support.broker`` (``BrokerProcess``, ``BrokerEnv``) instead."""
from __future__ import annotations

import uuid

from cluster.config import BrokerConfig
from cluster.metadata.model import BrokerInfo, MetadataImage, PartitionState, TopicInfo
from cluster.protocol import frames as protocol
from replica_proc.broker_metadata import BrokerMetadata
from replica_proc.channel import Channel
from replica_proc.replica_manager import ReplicaManager
from replica_proc.request_handler import RequestHandler
from tests.support.clock import T0, FakeClock


class ConnStub:
    """The broker side of one connection: responses written are kept, decoded on demand."""

    def __init__(self, name):
        self.name = name
        self.max_response_frame = 1 << 22
        self.client_pid = 0
        self.responses = []
        self._claimed = None

    def recv(self):
        return None

    def release(self):
        pass

    def try_send(self, frame):
        self.responses.append(bytes(frame))
        return True

    def claim(self, size):
        self._claimed = bytearray(size)
        return memoryview(self._claimed)

    def commit(self):
        self.responses.append(bytes(self._claimed))

    def abort(self):
        self._claimed = None


class FakeAlterPartition:
    """The leader's AlterPartition channel: keeps ``(proposal, callback)``; the test
    answers by calling the callback."""

    def __init__(self):
        self.proposals = []

    def submit(self, topic, index, leader_epoch, partition_epoch, new_isr, callback):
        self.proposals.append(((topic, index, leader_epoch, partition_epoch, list(new_isr)),
                               callback))
        return True  # taken (AlterPartitionManager.submit's answer)


class FakeSource:
    """The metadata page as the broker reads it: a version and the image."""

    def __init__(self, cluster_id):
        self.image = MetadataImage.empty(cluster_id)

    @property
    def version(self):
        return self.image.version

    def read(self):
        return self.image


class HandlerEnv:
    """Broker 0's RequestHandler over real logs in ``data_dir`` (module doc); ``settings``:
    broker config overrides; ``controller``: the broker's Controller (None: none here)."""

    def __init__(self, data_dir, cluster_id, settings, controller=None):
        self.cluster_id = cluster_id
        self.clock = FakeClock(1000.0)
        self.wall = FakeClock(T0)
        self.alter = FakeAlterPartition()
        self.config = BrokerConfig({"broker.id": 0, **settings}, data_dir=data_dir)
        self.replicas = ReplicaManager(0, self.config["log.dirs"], self.config, self.wall,
                                       loop_clock=self.clock, alter_partition=self.alter)
        self.source = FakeSource(cluster_id)
        self.handler = RequestHandler(0, self.config, self.replicas,
                                      BrokerMetadata(self.source, cluster_id), controller,
                                      None, self.clock)
        self.topics = {}  # name -> TopicInfo published
        self._correlation_id = 0

    @property
    def image(self):
        return self.source.image

    @image.setter
    def image(self, image):
        self.source.image = image

    def publish_topic(self, name, states, configs=None, alive=(0, 1, 2), controller_id=-1):
        """Publish topic ``name`` with ``states`` (its PartitionStates) in a new image of
        brokers 0-2 (``alive`` of them alive) and let the broker apply it."""
        self.topics[name] = TopicInfo(name, str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
                                      tuple(states), dict(configs or {}))
        self.image = MetadataImage(
            self.image.version + 1, self.cluster_id, controller_id,
            {b: BrokerInfo(b, 0, b in alive) for b in (0, 1, 2)}, dict(self.topics))
        assert self.handler.refresh_metadata()

    @staticmethod
    def state(name, index, leader, epoch, replicas, isr=None):
        return PartitionState(name, index, leader, epoch, tuple(replicas),
                              tuple(replicas if isr is None else isr))

    def channel(self, name="client"):
        return Channel(ConnStub(name))

    def send(self, channel, request):
        """Hand ``request`` to the handler as a frame arriving on ``channel``."""
        self._correlation_id = protocol.next_correlation_id(self._correlation_id)
        self.handler.handle(channel, protocol.encode_request(request, self._correlation_id,
                                                             "client-1"))
        return request

    def answer(self, channel, request):
        """The one response ``channel`` got (to ``request``), decoded."""
        [frame] = channel.conn.responses
        channel.conn.responses.clear()
        return protocol.decode_response(frame, request.__api_key__, request.__version__)[1]

    def call(self, request, channel=None):
        """Send ``request`` and return its answer, which must come at once."""
        channel = channel or self.channel()
        self.send(channel, request)
        assert channel.parked is None
        return self.answer(channel, request)

    def close(self):
        self.replicas.close()
