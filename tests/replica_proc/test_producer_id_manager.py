"""The broker's ProducerIdManager: ids from the blocks its controller allocates, asked for
ahead of exhaustion, through its own active controller at once or as AllocateProducerIds
to another broker's, answers lost or refused tried again after a backoff."""
from __future__ import annotations

import datetime
import types

import pytest
from kio.schema.errors import ErrorCode

from cluster.errors import CoordinatorLoadInProgressError, NotControllerError
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.controller.producer_ids import ProducerIdsBlock
from replica_proc.producer_id_manager import ProducerIdManager
from tests.support.clock import FakeClock

SIZE = 10


class Controller:
    """An active controller handing out blocks of SIZE."""

    def __init__(self, active=True):
        self.active = active
        self.next_id = 0
        self.asked = []

    def allocate_producer_ids(self, broker_id, broker_epoch=-1):
        self.asked.append(broker_id)
        block = ProducerIdsBlock(broker_id, self.next_id, SIZE)
        self.next_id += SIZE
        return block


class Channel:
    """Records what is sent; the test answers."""

    def __init__(self):
        self.sent = []
        self.accept = True

    def send(self, controller_id, request, on_answer):
        if self.accept:
            self.sent.append((controller_id, request, on_answer))
        return self.accept


def answer(on_answer, start, length=SIZE, code=0):
    classes = protocol.response_module(ApiKey.ALLOCATE_PRODUCER_IDS, 0)
    on_answer(classes.AllocateProducerIdsResponse(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode(code),
        producer_id_start=start, producer_id_len=length))


@pytest.fixture
def clock():
    return FakeClock()


def manager(clock, controller=None, channel=None):
    metadata = types.SimpleNamespace(image=types.SimpleNamespace(controller_id=7))
    return ProducerIdManager(3, metadata, controller, channel or Channel(), clock)


def test_the_active_controller_gives_blocks_at_once_and_the_next_ahead_of_time(clock):
    controller = Controller()
    ids = manager(clock, controller)
    assert [ids.generate_producer_id() for _ in range(8)] == list(range(8))
    assert controller.asked == [3]
    ids.generate_producer_id()  # the ninth: 90 % used, the next block is asked for
    assert controller.asked == [3, 3]
    assert [ids.generate_producer_id() for _ in range(11)] == list(range(9, 20))
    assert controller.asked == [3, 3, 3]  # the third block was prefetched as well


def test_a_remote_controller_answers_later_and_the_broker_waits_meanwhile(clock):
    channel = Channel()
    ids = manager(clock, Controller(active=False), channel)
    with pytest.raises(CoordinatorLoadInProgressError):
        ids.generate_producer_id()
    ids.poll()
    (controller_id, request, on_answer), = channel.sent
    assert (controller_id, request.broker_id, request.broker_epoch) == (7, 3, -1)
    ids.poll()
    assert len(channel.sent) == 1  # one request in flight at a time
    with pytest.raises(CoordinatorLoadInProgressError):
        ids.generate_producer_id()
    answer(on_answer, 500)
    ids.poll()
    assert [ids.generate_producer_id() for _ in range(SIZE)] == list(range(500, 500 + SIZE))


def test_lost_and_refused_answers_are_tried_again_after_a_backoff(clock):
    channel = Channel()
    ids = manager(clock, None, channel)
    with pytest.raises(CoordinatorLoadInProgressError):
        ids.generate_producer_id()
    ids.poll()
    channel.sent[-1][2](None)  # the connection to the controller was lost
    ids.poll()
    assert len(channel.sent) == 1
    clock.advance(0.1)
    ids.poll()
    answer(channel.sent[-1][2], -1, 0, NotControllerError.errno)
    ids.poll()
    clock.advance(0.1)
    ids.poll()
    assert len(channel.sent) == 2  # the backoff doubled
    clock.advance(0.1)
    ids.poll()
    answer(channel.sent[-1][2], 2000)
    ids.poll()
    assert ids.generate_producer_id() == 2000
