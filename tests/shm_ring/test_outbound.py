"""A broker's outbound connections (connect(waker=listener)): announced without waiting for
the accept, and their responses ring the waker's doorbell through the same parked-flag
handshake as every wake-up.

Both brokers are Listeners in the test process: the handshake does not care which process
stands at which end, and the test can then look at every flag and semaphore.
"""
from __future__ import annotations

import posix_ipc
import pytest

from shm_ring import Listener, PeerClosedError, connect
from shm_ring.naming import list_objects
from shm_ring.ring import READER_END
from shm_ring.wakeup import READER_PARKED_WORD, WaitPolicy
from tests.support.clock import FakeClock

FAST = WaitPolicy(spin=5, poll_interval=0.02)


@pytest.fixture
def leader(cluster_id):
    broker = Listener(cluster_id, 1, policy=FAST, liveness_interval=0.02)
    yield broker
    broker.close()


@pytest.fixture
def follower(cluster_id):
    broker = Listener(cluster_id, 2, policy=FAST, liveness_interval=0.02)
    yield broker
    broker.close()


def accepted_pair(cluster_id, leader, follower, policy=FAST):
    client = connect(cluster_id, 1, timeout=0, capacity=1 << 14, policy=policy,
                     waker=follower)
    [conn] = leader.accept_pending()
    return client, conn


def test_connect_with_a_waker_returns_before_the_accept_and_requests_wait(
        cluster_id, leader, follower):
    client = connect(cluster_id, 1, timeout=0, capacity=1 << 14, policy=FAST,
                     waker=follower)
    assert not client.accepted and client.broker_pid == 0
    assert client._objects.rsp.end_doorbell(READER_END) == 2
    assert client.send(b"early", timeout=0)
    [conn] = leader.accept_pending()
    assert client.accepted
    assert bytes(conn.recv()) == b"early"
    conn.release()
    client.close()


def test_a_response_posts_the_wakers_doorbell_when_it_is_parked(cluster_id, leader,
                                                                   follower):
    client, conn = accepted_pair(cluster_id, leader, follower)
    assert follower.watched == [client]
    [(words, index)] = follower.doorbell.slot.companions
    assert index == READER_PARKED_WORD
    assert not follower.wait(0)  # nothing to read yet
    words[index] = 1  # what the follower's wait sets before it blocks
    assert conn.try_send(b"answer")
    assert words[index] == 0  # the writer saw the flag, cleared it and posted...
    follower.doorbell.semaphore.acquire(0)  # ...the doorbell (BusyError otherwise)
    assert client._objects.rsp_data.semaphore.value == 0  # not the connection's own
    assert follower.wait(0)  # the response is an event of the follower's loop
    assert bytes(client.recv(timeout=0)) == b"answer"
    client.release()
    assert not follower.wait(0)
    client.close()


def test_a_response_written_while_the_waker_is_busy_posts_nothing(cluster_id, leader,
                                                                     follower):
    client, conn = accepted_pair(cluster_id, leader, follower)
    assert conn.try_send(b"answer")
    with pytest.raises(posix_ipc.BusyError):
        follower.doorbell.semaphore.acquire(0)
    assert follower.wait(0)
    client.close()


def test_the_wait_raises_and_clears_the_companion_flags(cluster_id, leader, follower):
    client, conn = accepted_pair(cluster_id, leader, follower)
    [(words, index)] = follower.doorbell.slot.companions
    seen = []
    real = follower._has_event

    def spy():
        seen.append(words[index])
        return real()
    follower._has_event = spy
    assert not follower.wait(0.03)  # parks at least once, nothing comes
    assert 1 in seen and words[index] == 0
    client.close()


def test_the_peer_closing_wakes_the_waker_and_recv_raises(cluster_id, leader, follower):
    client, conn = accepted_pair(cluster_id, leader, follower)
    name = client.name
    [(words, index)] = follower.doorbell.slot.companions
    words[index] = 1
    leader.close()
    follower.doorbell.semaphore.acquire(0)  # the close was posted to the follower
    assert follower.wait(0)
    with pytest.raises(PeerClosedError):
        client.recv(timeout=0)
    assert follower.watched == [] and follower.doorbell.slot.companions == []
    assert not any(n.startswith(name) for n in list_objects(cluster_id))


def test_close_stops_the_watch_and_the_leader_reaps_it(cluster_id, leader, follower):
    client, conn = accepted_pair(cluster_id, leader, follower)
    client.close()
    client.close()
    assert follower.watched == [] and follower.doorbell.slot.companions == []
    assert leader.reap() == [conn]


def test_check_notices_a_broker_that_closes_before_accepting(cluster_id, leader, follower):
    clock = FakeClock(100.0)
    policy = WaitPolicy(spin=5, poll_interval=0.02, clock=clock)
    client = connect(cluster_id, 1, timeout=0, capacity=1 << 14, policy=policy,
                     waker=follower)
    client.check()  # not due yet, and the leader is there
    clock.advance(1.0)
    client.check()
    leader.close()
    clock.advance(1.0)
    with pytest.raises(PeerClosedError, match="before accepting"):
        client.check()
    assert follower.watched == []


def test_accept_refuses_a_waker_doorbell_that_does_not_exist(cluster_id, leader, follower):
    client = connect(cluster_id, 1, timeout=0, capacity=1 << 14, policy=FAST,
                     waker=follower)
    client._objects.rsp.set_end_doorbell(READER_END, 7)  # no broker 7
    assert leader.accept_pending() == []
    assert not client.accepted
    client.close()


def test_a_waker_of_another_cluster_is_refused(cluster_id, leader):
    other = Listener("k" + cluster_id[1:][::-1], 2, policy=FAST)
    try:
        with pytest.raises(ValueError, match="cluster"):
            connect(cluster_id, 1, timeout=0, waker=other)
    finally:
        other.close()
