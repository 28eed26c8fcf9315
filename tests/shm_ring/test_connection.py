"""Connections between processes: open, talk, close; killed clients and brokers; stale objects.

Every test bounds its time, kills the processes it started by pid and unlinks what it made
(the cluster_id fixture sweeps whatever a failure left behind).
"""
from __future__ import annotations

import os
import signal
import struct
import threading
import time

import posix_ipc
import pytest

from shm_ring import (
    Listener,
    PeerClosedError,
    PeerDiedError,
    connect,
    listener_descriptor as ld,
    ring_descriptor as rd,
)
from shm_ring.naming import (
    SharedRegion,
    SquattedNameError,
    cleanup_stale,
    doorbell_name,
    list_objects,
)
from shm_ring.ring import Ring
from shm_ring.wakeup import WaitPolicy
from tests.support.bounds import BOUND
from tests.support.other_user import OTHER_UID, as_other_user, needs_root
from tests.support.processes import CTX

FAST = WaitPolicy(spin=20, poll_interval=0.02)


@pytest.fixture
def listener(cluster_id):
    """A broker (id 1) whose listener lives in the test process."""
    broker = Listener(cluster_id, 1, policy=FAST, liveness_interval=0.02)
    yield broker
    broker.close()


def names_of(connection_name: str) -> list[str]:
    return [connection_name + suffix for suffix in (".req", ".req.space", ".rsp", ".rsp.data")]


def expect(pipe, what=None):
    assert pipe.poll(BOUND), f"nothing from the other process (expected {what!r})"
    message = pipe.recv()
    if what is not None:
        assert message == what
    return message


def serve_until(listener: Listener, done, *, echo: bool = True) -> list[str]:
    """Run a broker loop until done(dropped names); return the names of the dropped
    connections. With echo, every request is answered with its bytes reversed; without, requests
    are left in their rings."""
    dropped: list[str] = []
    deadline = time.monotonic() + BOUND
    while not done(dropped):
        assert time.monotonic() < deadline, "broker loop timed out"
        listener.wait(0.02)
        listener.accept_pending()
        for connection in listener.ready() if echo else ():
            while (frame := connection.recv()) is not None:
                response = bytes(frame)[::-1]
                while not connection.try_send(response):
                    listener.wait(0.02)
            connection.release()
        dropped.extend(c.name for c in listener.reap())
    return dropped


def _echo_broker(cluster_id: str, pipe) -> None:
    """Broker 1 in a child process: echoes reversed frames until the pipe says stop."""
    listener = Listener(cluster_id, 1, policy=FAST, liveness_interval=0.02)
    pipe.send("listening")
    try:
        def stop(dropped):
            for name in dropped:
                pipe.send(("dropped", name))
            dropped.clear()
            return pipe.poll()
        serve_until(listener, stop)
    finally:
        listener.close()


@pytest.mark.multiprocess
def test_connect_talk_and_close_between_processes(cluster_id, spawn):
    parent, child = CTX.Pipe()
    broker = spawn(_echo_broker, cluster_id, child)
    expect(parent, "listening")
    client = connect(cluster_id, 1, timeout=BOUND, capacity=1 << 16, policy=FAST)
    assert client.broker_pid == broker.pid
    assert all(name in list_objects(cluster_id) for name in names_of(client.name))
    longest = client.max_request_frame
    for size in (0, 1, 100, 5000, longest, longest + 1, 5 * (1 << 16) + 3):  # then fragments
        payload = os.urandom(size)
        assert client.send(payload, BOUND)
        assert bytes(client.recv(BOUND)) == payload[::-1]
        client.release()
    view = client.claim(64, BOUND)  # encode in place
    view[:5] = b"claim"
    client.commit(5)
    assert bytes(client.recv(BOUND)) == b"mialc"
    client.release()
    client.close()
    client.close()
    assert expect(parent) == ("dropped", client.name)
    assert not set(names_of(client.name)) & set(list_objects(cluster_id))
    parent.send("stop")
    broker.join(BOUND)
    assert broker.exitcode == 0
    assert list_objects(cluster_id) == []  # the broker unlinked its listener and doorbell


def _client(cluster_id: str, count: int, delay: float, pipe) -> None:
    time.sleep(delay)
    client = connect(cluster_id, 1, timeout=BOUND, capacity=1 << 14, policy=FAST)
    for number in range(count):
        payload = b"%d:%d;" % (os.getpid(), number) * (number % 40 + 1)
        if not client.send(payload, BOUND):
            pipe.send(("send timed out", number))
            return
        answer = bytes(client.recv(BOUND))
        client.release()
        if answer != payload[::-1]:
            pipe.send(("wrong answer", number))
            return
    client.close()
    pipe.send("done")


@pytest.mark.multiprocess
def test_clients_connect_at_any_time_and_share_one_doorbell(cluster_id, spawn, listener):
    pipes = []
    for number, delay in enumerate((0.0, 0.0, 0.0, 0.2, 0.4)):
        parent, child = CTX.Pipe()
        spawn(_client, cluster_id, 300 + number, delay, child)
        pipes.append(parent)
    dropped = serve_until(listener, lambda dropped: len(dropped) == len(pipes))
    assert [expect(pipe) for pipe in pipes] == ["done"] * len(pipes)
    assert len(set(dropped)) == len(pipes)
    assert listener.connections == []


def _client_that_gets_killed(cluster_id: str, pipe) -> None:
    client = connect(cluster_id, 1, timeout=BOUND, policy=FAST)
    client.send(b"hello", BOUND)
    pipe.send(client.name)
    time.sleep(BOUND * 2)


@pytest.mark.multiprocess
def test_killed_client_is_dropped_and_its_objects_unlinked(cluster_id, spawn, listener):
    parent, child = CTX.Pipe()
    client = spawn(_client_that_gets_killed, cluster_id, child)
    serve_until(listener, lambda _: parent.poll(), echo=False)
    name = expect(parent)
    [connection] = listener.connections
    assert connection.name == name and connection.client_pid == client.pid
    assert bytes(connection.recv()) == b"hello"
    connection.release()
    os.kill(client.pid, signal.SIGKILL)  # not reaped: a zombie counts as dead too
    dropped = serve_until(listener, lambda dropped: dropped)
    assert dropped == [name]
    assert not set(names_of(name)) & set(list_objects(cluster_id))


@pytest.mark.multiprocess
def test_killed_broker_raises_in_the_client_and_the_client_unlinks(cluster_id, spawn):
    parent, child = CTX.Pipe()
    broker = spawn(_echo_broker, cluster_id, child)
    expect(parent, "listening")
    client = connect(cluster_id, 1, timeout=BOUND, policy=FAST)
    client.send(b"ping", BOUND)
    assert bytes(client.recv(BOUND)) == b"gnip"
    client.release()
    os.kill(broker.pid, signal.SIGKILL)
    broker.join(BOUND)
    with pytest.raises(PeerDiedError) as died:
        client.recv(BOUND)
    message = str(died.value)
    assert f"broker 1 of cluster {cluster_id} (pid {broker.pid}) died" in message
    assert client.name in message and died.value.pid == broker.pid
    with pytest.raises(PeerDiedError, match="broker 1"):  # and on every later call
        client.send(b"again", BOUND)
    assert not set(names_of(client.name)) & set(list_objects(cluster_id))
    client.close()
    # Only the dead broker's own objects remain, for the next start to sweep.
    assert cleanup_stale(cluster_id) == [f"/ringlog.{cluster_id}.b1.doorbell",
                                         f"/ringlog.{cluster_id}.b1.listener"]


@pytest.mark.multiprocess
def test_client_blocked_on_a_full_request_ring_notices_the_killed_broker(cluster_id, spawn):
    parent, child = CTX.Pipe()
    broker = spawn(_echo_broker, cluster_id, child)
    expect(parent, "listening")
    client = connect(cluster_id, 1, timeout=BOUND, capacity=1024, policy=FAST)
    os.kill(broker.pid, signal.SIGKILL)
    broker.join(BOUND)
    with pytest.raises(PeerDiedError, match=f"pid {broker.pid}"):
        for _ in range(100):  # fills the ring, then waits for room and checks the broker
            client.send(b"r" * 100, BOUND)
    cleanup_stale(cluster_id)


@pytest.mark.multiprocess
def test_broker_close_reaches_the_client_as_peer_closed(cluster_id, spawn):
    parent, child = CTX.Pipe()
    broker = spawn(_echo_broker, cluster_id, child)
    expect(parent, "listening")
    client = connect(cluster_id, 1, timeout=BOUND, policy=FAST)
    parent.send("stop")
    broker.join(BOUND)
    with pytest.raises(PeerClosedError, match=f"broker 1 of cluster {cluster_id} closed"):
        client.recv(BOUND)
    assert list_objects(cluster_id) == []


def test_connect_to_a_broker_that_is_not_there_is_refused(cluster_id):
    with pytest.raises(ConnectionRefusedError, match=f"broker 7 of cluster {cluster_id} is not"
                                                     f" listening.*does not exist"):
        connect(cluster_id, 7, timeout=0.05)


@pytest.mark.multiprocess
def test_connect_waits_for_a_broker_that_starts_later(cluster_id, spawn):
    parent, child = CTX.Pipe()

    def late_broker():
        time.sleep(0.3)
        _echo_broker(cluster_id, child)
    broker = spawn(late_broker)
    client = connect(cluster_id, 1, timeout=BOUND, policy=FAST)
    client.send(b"late", BOUND)
    assert bytes(client.recv(BOUND)) == b"etal"
    client.close()
    expect(parent, "listening")
    parent.send("stop")
    broker.join(BOUND)
    assert broker.exitcode == 0


def _broker_that_dies(cluster_id: str, pipe) -> None:
    Listener(cluster_id, 1)
    pipe.send("listening")
    time.sleep(BOUND * 2)


@pytest.mark.multiprocess
def test_a_dead_brokers_listener_is_taken_over_and_a_live_one_refused(cluster_id, spawn):
    parent, child = CTX.Pipe()
    dead = spawn(_broker_that_dies, cluster_id, child)
    expect(parent, "listening")
    with pytest.raises(FileExistsError, match=f"already listening .*pid {dead.pid}"):
        Listener(cluster_id, 1)
    os.kill(dead.pid, signal.SIGKILL)
    dead.join(BOUND)
    with pytest.raises(ConnectionRefusedError, match=f"left by pid {dead.pid}"):
        connect(cluster_id, 1, timeout=0.1)
    with Listener(cluster_id, 1) as successor:
        assert successor.connections == []
    assert list_objects(cluster_id) == []


def _lazy_reader(cluster_id: str, pipe) -> None:
    """A client that reads only when told how many responses to read."""
    client = connect(cluster_id, 1, timeout=BOUND, capacity=1024, policy=FAST)
    pipe.send("connected")
    received = []
    for _ in range(expect(pipe)):
        received.append(bytes(client.recv(BOUND)))
        client.release()
    pipe.send(received)
    expect(pipe, "bye")
    client.close()


@pytest.mark.multiprocess
def test_full_response_ring_rings_the_doorbell_when_the_client_frees_room(cluster_id, spawn,
                                                                             listener):
    parent, child = CTX.Pipe()
    client = spawn(_lazy_reader, cluster_id, child)
    serve_until(listener, lambda _: parent.poll(), echo=False)
    expect(parent, "connected")
    [connection] = listener.connections
    sent = 0
    while connection.try_send(b"%d" % sent):
        sent += 1
    assert not listener.wait(0)  # nothing to do yet
    parent.send(sent + 1)
    wake_ups = 0
    while True:  # each release by the client rings the doorbell until the frame fits
        assert listener.wait(BOUND), "the client's release did not ring the doorbell"
        wake_ups += 1
        if connection.try_send(b"%d" % sent):
            break
        assert wake_ups <= sent
    assert expect(parent) == [b"%d" % number for number in range(sent + 1)]
    parent.send("bye")
    assert serve_until(listener, lambda dropped: dropped) == [connection.name]
    client.join(BOUND)
    assert client.exitcode == 0


@pytest.mark.multiprocess
def test_broker_claims_a_response_in_place(cluster_id, spawn, listener):
    parent, child = CTX.Pipe()
    client = spawn(_lazy_reader, cluster_id, child)
    serve_until(listener, lambda _: parent.poll(), echo=False)
    expect(parent, "connected")
    [connection] = listener.connections
    view = connection.claim(300)
    view[:4] = b"file"  # e.g. os.readv(fd, [view])
    connection.commit(4)
    connection.claim(0)  # an empty frame is a frame too
    connection.commit()
    assert connection.ring_occupancy >= 2 * 8 + 4  # two frame headers and "file", unread
    parent.send(2)
    assert expect(parent) == [b"file", b""]
    assert connection.ring_occupancy == 0  # released by the client
    parent.send("bye")
    serve_until(listener, lambda dropped: dropped)
    assert connection.ring_occupancy == 0  # closed: nothing to read any more
    client.join(BOUND)
    assert client.exitcode == 0


def _crashing_pair(cluster_id: str, pipe) -> None:
    client = connect(cluster_id, 1, timeout=BOUND, policy=FAST)
    pipe.send(client.name)
    time.sleep(BOUND * 2)


@pytest.mark.multiprocess
def test_cleanup_stale_after_broker_and_client_crash(cluster_id, spawn):
    parent, child = CTX.Pipe()
    broker = spawn(_broker_loop_forever, cluster_id)
    client = spawn(_crashing_pair, cluster_id, child)
    name = expect(parent)
    for process in (broker, client):
        os.kill(process.pid, signal.SIGKILL)
        process.join(BOUND)
    expected = sorted(names_of(name) + [f"/ringlog.{cluster_id}.b1.doorbell",
                                        f"/ringlog.{cluster_id}.b1.listener"])
    assert cleanup_stale(cluster_id) == expected
    assert list_objects(cluster_id) == []


def _broker_loop_forever(cluster_id: str) -> None:
    listener = Listener(cluster_id, 1, policy=FAST)
    serve_until(listener, lambda _: False)


def _client_expecting_close(cluster_id: str, pipe) -> None:
    client = connect(cluster_id, 1, timeout=BOUND, policy=FAST)
    pipe.send("connected")
    try:
        client.recv(BOUND)
        pipe.send("no error")
    except PeerClosedError as exc:
        pipe.send(str(exc))


@pytest.mark.multiprocess
def test_the_broker_drops_one_connection_and_its_client_sees_it_closed(cluster_id, spawn,
                                                                        listener):
    parent, child = CTX.Pipe()
    client = spawn(_client_expecting_close, cluster_id, child)
    serve_until(listener, lambda _: parent.poll(), echo=False)
    expect(parent, "connected")
    [connection] = listener.connections
    assert 0 < connection.max_response_frame < 1 << 20
    listener.drop(connection)
    assert listener.connections == [] and listener.ready() == []
    assert f"broker 1 of cluster {cluster_id} closed" in expect(parent)
    client.join(BOUND)
    assert client.exitcode == 0


def _client_waiting_for_accept(cluster_id: str) -> None:
    connect(cluster_id, 1, timeout=BOUND * 2, policy=FAST)


@pytest.mark.multiprocess
def test_a_connection_whose_client_and_broker_both_died_is_unlinked_by_the_next_listener(
        cluster_id, spawn):
    parent, child = CTX.Pipe()
    broker = spawn(_broker_that_dies, cluster_id, child)
    expect(parent, "listening")
    client = spawn(_client_waiting_for_accept, cluster_id)
    deadline = time.monotonic() + BOUND
    while len(list_objects(cluster_id)) < 6:  # listener, doorbell and the 4 of the connection
        assert time.monotonic() < deadline, "the client never created its connection"
        time.sleep(0.01)
    for process in (client, broker):  # announced, never accepted; nobody left to unlink it
        os.kill(process.pid, signal.SIGKILL)
        process.join(BOUND)
    [orphan] = {name.rsplit(".", 1)[0] for name in list_objects(cluster_id)
                if f".c{client.pid}-" in name and name.endswith(".req")}
    with Listener(cluster_id, 1, policy=FAST, orphan_interval=0.02) as successor:
        assert successor.reap() == []
        assert not set(names_of(orphan)) & set(list_objects(cluster_id))
    assert list_objects(cluster_id) == []


# -- a damaged listener damages only the connections it carried -------------------------------

DAMAGES = {
    # the accept ring's capacity word overwritten: clients could not even map the ring
    "ring header": (ld.ACCEPT_RING_OFFSET + rd.CAPACITY_OFFSET, 41939771529891840),
    # a tail far past the head: the ring looks full to every client
    "ring positions": (ld.ACCEPT_RING_OFFSET + rd.TAIL_POSITION_OFFSET, 1 << 40),
    # the broker's pid wiped: clients take the listener for not ready
    "identity": (ld.BROKER_PID_OFFSET, 0),
}


def scribble(listener: Listener, offset: int, value: int) -> None:
    """What a rogue process of the same user does: map the listener, write one word."""
    region = SharedRegion.open(listener.name)
    try:
        struct.pack_into("<q", region.buf, offset, value)
    finally:
        region.close()


def test_a_client_meeting_a_damaged_accept_ring_gets_a_retriable_refusal(cluster_id,
                                                                           listener):
    scribble(listener, *DAMAGES["ring header"])
    with pytest.raises(ConnectionRefusedError, match=r"broker 1 of cluster .* cannot take "
                                                     r"connection c\d+-[0-9a-f]+: its accept "
                                                     r"ring is damaged \(ring .* header says "
                                                     r"capacity 41939771529891840"):
        connect(cluster_id, 1, timeout=0.2, capacity=1 << 14, policy=FAST)
    assert list_objects(cluster_id) == sorted([listener.name, listener.doorbell.name])


@pytest.mark.multiprocess
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_the_broker_rebuilds_a_damaged_listener_and_clients_connect_again(cluster_id, spawn,
                                                                          listener, damage):
    pipes = []
    parent, child = CTX.Pipe()
    spawn(_client, cluster_id, 3, 0.0, child)  # before the damage: served as usual
    pipes.append(parent)
    serve_until(listener, lambda dropped: len(dropped) == 1)
    scribble(listener, *DAMAGES[damage])
    for number in range(3):  # after it: all served, by the rebuilt listener
        parent, child = CTX.Pipe()
        spawn(_client, cluster_id, 5 + number, 0.05 * number, child)
        pipes.append(parent)
    dropped = serve_until(listener, lambda dropped: len(dropped) == 3)
    assert [expect(pipe) for pipe in pipes] == ["done"] * 4
    assert len(set(dropped)) == 3
    assert listener.rebuilds == 1


@pytest.mark.multiprocess
def test_a_connection_announced_before_the_damage_is_accepted_by_the_rebuild(cluster_id,
                                                                             spawn, listener):
    parent, child = CTX.Pipe()
    spawn(_client, cluster_id, 4, 0.0, child)
    deadline = time.monotonic() + BOUND
    while not listener._accept.readable():  # announced, not yet accepted
        assert time.monotonic() < deadline, "the client never announced itself"
        time.sleep(0.005)
    scribble(listener, ld.ACCEPT_RING_OFFSET + rd.HEAD_POSITION_OFFSET, 1 << 33)
    dropped = serve_until(listener, lambda dropped: len(dropped) == 1)
    assert expect(parent) == "done"
    assert len(dropped) == 1 and listener.rebuilds == 1


def test_a_client_refuses_a_broker_serving_another_instance(cluster_id):
    broker = Listener(cluster_id, 2, policy=FAST, instance=(7, 42))
    try:
        with pytest.raises(ConnectionRefusedError, match=r"broker 2 of cluster .* is not "
                                                         r"listening at .*: its broker \(pid "
                                                         r"\d+\) serves instance \(7, 42\), "
                                                         r"not \(7, 43\)"):
            connect(cluster_id, 2, timeout=0.1, policy=FAST, instance=(7, 43))
        scribble(broker, ld.INSTANCE_OFFSET, 8)  # damage to the instance words is repaired
        assert broker.accept_pending() == [] and broker.rebuilds == 1
        assert tuple(broker._words[1:3]) == (7, 42)
    finally:
        broker.close()


def _make_doorbell(name):
    posix_ipc.Semaphore(name, posix_ipc.O_CREX, mode=0o666).close()


@needs_root
@pytest.mark.multiprocess
def test_a_broker_refuses_a_doorbell_another_user_made_and_leaves_it(cluster_id):
    name = doorbell_name(cluster_id, 4)
    assert as_other_user(_make_doorbell, name) == 0
    try:
        with pytest.raises(SquattedNameError, match=f"sem.{name[1:]} belongs to uid "
                                                    f"{OTHER_UID}"):
            Listener(cluster_id, 4, policy=FAST)
        assert list_objects(cluster_id) == [name]
    finally:
        posix_ipc.unlink_semaphore(name)


def _accepted_clients(cluster_id, listener, count):
    """``count`` connections to ``listener`` (opened by a thread), once it accepted them."""
    clients = []
    opener = threading.Thread(target=lambda: clients.extend(
        connect(cluster_id, 1, timeout=BOUND, capacity=1 << 14, policy=FAST)
        for _ in range(count)))
    opener.start()
    deadline = time.monotonic() + BOUND
    count += len(listener.connections)
    while len(listener.connections) < count:
        assert time.monotonic() < deadline, "connections not accepted in time"
        listener.wait(0.01)
        listener.accept_pending()
    opener.join(BOUND)
    return clients


def test_a_wait_looks_at_no_idle_connection_and_ends_at_a_request(cluster_id, listener,
                                                                   monkeypatch):
    """The doorbell's wait watches the listener's requests pending flag, not every ring: with
    many idle connections it reads none of their request rings, and a request on any of them
    ends it; the flag is cleared when the wait ends, so the next wait times out."""
    clients = _accepted_clients(cluster_id, listener, 12)
    try:
        listener.wait(0.0)  # the flag the connects set is cleared
        assert not listener.wait(0.02)
        requests = {id(c._req) for c in listener.connections}
        looked = []
        readable = Ring.readable

        def counting(ring):
            if id(ring) in requests:
                looked.append(ring)
            return readable(ring)
        monkeypatch.setattr(Ring, "readable", counting)
        assert not listener.wait(0.05)
        assert looked == []
        assert clients[7].send(b"hello", BOUND)
        assert listener.wait(BOUND)
        ready = listener.ready()
        assert [c.name for c in ready] == [clients[7].name]
        assert bytes(ready[0].recv()) == b"hello"
        ready[0].release()
        assert not listener.wait(0.02)
    finally:
        for client in clients:
            client.close()


def test_a_wait_ends_at_once_while_a_served_connection_still_has_requests(cluster_id,
                                                                          listener):
    """A broker that takes only some of a connection's requests in a turn (its requests
    per turn) is not put to sleep by the next wait, though no client set the pending flag
    since; a look at only the connections with work finds the rest."""
    clients = _accepted_clients(cluster_id, listener, 3)
    try:
        for number in range(3):
            assert clients[1].send(b"request %d" % number, BOUND)
        assert listener.wait(BOUND)
        taken = []
        for _ in range(3):
            ready = listener.ready()
            assert [c.name for c in ready] == [clients[1].name]
            taken.append(bytes(ready[0].recv()))  # one request per turn
            ready[0].release()
            if len(taken) < 3:
                assert listener.wait(10.0 * FAST.poll_interval)  # not a timeout
        assert taken == [b"request 0", b"request 1", b"request 2"]
        assert listener.ready() == []
        assert not listener.wait(0.02)
    finally:
        for client in clients:
            client.close()


def test_a_request_that_comes_while_the_broker_reaps_ends_its_next_wait(cluster_id,
                                                                         listener):
    """reap() looks at the closed flags when the pending flag is set but leaves the flag to
    wait() and ready(): a request that set it must still end the next wait."""
    clients = _accepted_clients(cluster_id, listener, 2)
    try:
        listener.wait(0.0)
        assert listener.ready() == []
        assert clients[0].send(b"late", BOUND)  # after the turn's look, before its reap
        assert listener.reap() == []
        assert listener.wait(10.0 * FAST.poll_interval)  # not a timeout
        [ready] = listener.ready()
        assert bytes(ready.recv()) == b"late"
        ready.release()
    finally:
        for client in clients:
            client.close()


def _looks_at_requests(monkeypatch, listener):
    """Record the request rings the broker reads (readable) and the closed flags it reads
    (end_closed), as (kind, connection name) pairs."""
    names = {id(c._req): c.name for c in listener.connections}
    looked = []
    readable, end_closed = Ring.readable, Ring.end_closed

    def counting_readable(ring):
        if id(ring) in names:
            looked.append(("ring", names[id(ring)]))
        return readable(ring)

    def counting_closed(ring, end):
        if id(ring) in names:
            looked.append(("closed", names[id(ring)]))
        return end_closed(ring, end)
    monkeypatch.setattr(Ring, "readable", counting_readable)
    monkeypatch.setattr(Ring, "end_closed", counting_closed)
    return looked


def test_a_busy_turn_looks_only_at_the_connection_with_a_request_and_a_close(cluster_id,
                                                                             monkeypatch):
    """With the requests pending flags, a turn after a request reads that connection's
    request ring and closed flag only, not the other idle ones'; a client's close is found
    the same way (no liveness check due in between)."""
    broker = Listener(cluster_id, 1, policy=FAST, liveness_interval=BOUND * 10)
    clients = []
    try:
        clients += _accepted_clients(cluster_id, broker, 12)
        broker.wait(0.0)
        broker.ready()
        broker.reap()  # the first reap's liveness check is behind us
        looked = _looks_at_requests(monkeypatch, broker)
        assert clients[5].send(b"one", BOUND)
        assert broker.wait(BOUND)
        [ready] = broker.ready()
        assert ready.name == clients[5].name and bytes(ready.recv()) == b"one"
        ready.release()
        assert broker.reap() == []
        assert broker.ready() == []  # one more look at the connection that had requests
        assert {name for _, name in looked} == {clients[5].name}
        looked.clear()
        name = clients[9].name
        clients[9].close()
        assert broker.wait(BOUND)
        assert broker.ready() == []
        assert [c.name for c in broker.reap()] == [name]
        assert {name for _, name in looked} == {clients[9].name}
    finally:
        for client in clients:
            client.close()
        broker.close()


def test_a_request_committed_right_after_the_broker_looked_at_its_ring_ends_the_next_wait(
        cluster_id, listener, monkeypatch):
    """The broker clears a connection's pending byte before it looks at the ring: a frame
    committed just after that look (here: as the look returns) sets the byte and the flag
    again, so the next wait ends and the next ready() finds the frame."""
    clients = _accepted_clients(cluster_id, listener, 3)
    try:
        listener.wait(0.0)
        assert listener.ready() == []
        readable = Ring.readable
        [target] = [c._req for c in listener.connections if c.name == clients[1].name]
        sent = []

        def racing(ring):
            result = readable(ring)
            if ring is target and not sent:
                sent.append(clients[1].send(b"late", BOUND))  # lands after the look
            return result
        monkeypatch.setattr(Ring, "readable", racing)
        clients[1]._doorbell.ring()  # its byte set with no frame (as a close sets it)
        assert listener.wait(BOUND)
        assert listener.ready() == [] and sent == [True]  # the look found the ring empty
        monkeypatch.setattr(Ring, "readable", readable)
        assert listener.wait(10.0 * FAST.poll_interval)  # not a timeout
        [ready] = listener.ready()
        assert ready.name == clients[1].name and bytes(ready.recv()) == b"late"
        ready.release()
    finally:
        for client in clients:
            client.close()


def test_a_request_flagged_right_after_the_broker_read_the_flags_ends_the_next_wait(
        cluster_id, listener, monkeypatch):
    """The broker clears the requests pending flag before it reads the connections' bytes:
    a client that sets its byte just after that read sets the flag after the clear, so the
    next wait ends and the next ready() looks at its connection."""
    clients = _accepted_clients(cluster_id, listener, 3)
    try:
        listener.wait(0.0)
        assert listener.ready() == []
        marked = Listener._marked
        sent = []

        def racing(self, limit):
            result = marked(self, limit)
            if not sent:
                sent.append(clients[2].send(b"late", BOUND))  # lands after the read
            return result
        monkeypatch.setattr(Listener, "_marked", racing)
        assert clients[0].send(b"early", BOUND)
        got = {}
        while len(got) < 2:  # each wait ends at once: no timeout while "late" waits
            assert listener.wait(10.0 * FAST.poll_interval)
            for ready in listener.ready():
                got[ready.name] = bytes(ready.recv())
                ready.release()
            monkeypatch.setattr(Listener, "_marked", marked)
        assert sent == [True]
        assert got == {clients[0].name: b"early", clients[2].name: b"late"}
    finally:
        for client in clients:
            client.close()


def test_a_connection_without_a_slot_is_still_served_and_its_close_found(cluster_id,
                                                                         listener):
    """When every slot of the requests pending flags is given, a connection gets none; it
    is looked at whenever the flag is set. A freed slot is given again."""
    clients = _accepted_clients(cluster_id, listener, 2)
    try:
        slots = sorted(c.slot for c in listener.connections)
        assert slots == [0, 1]
        free = list(listener._free_slots)
        listener._free_slots.clear()  # a full table
        clients += _accepted_clients(cluster_id, listener, 1)
        [unslotted] = [c for c in listener.connections if c.name == clients[2].name]
        assert unslotted.slot == -1
        assert clients[2].send(b"no slot", BOUND)
        assert listener.wait(BOUND)
        [ready] = listener.ready()
        assert ready is unslotted and bytes(ready.recv()) == b"no slot"
        ready.release()
        listener._free_slots[:] = free
        name = clients[0].name
        clients[0].close()
        assert listener.wait(BOUND)
        listener.ready()
        assert [c.name for c in listener.reap()] == [name]
        clients += _accepted_clients(cluster_id, listener, 1)
        [newest] = [c for c in listener.connections if c.name == clients[3].name]
        assert newest.slot == 0  # the dropped connection's slot, given again
        assert clients[3].send(b"reused", BOUND)
        assert listener.wait(BOUND)
        [ready] = listener.ready()
        assert ready is newest and bytes(ready.recv()) == b"reused"
        ready.release()
    finally:
        for client in clients:
            client.close()


def test_a_client_refuses_a_listener_of_another_layout_version_at_once(cluster_id,
                                                                        listener):
    """A broker of another ringlog version (another listener layout) is refused with a
    message naming both versions, without waiting for the timeout."""
    region = SharedRegion.open(listener.name)
    try:
        struct.pack_into("<q", region.buf, ld.MAGIC_OFFSET, ld.MAGIC_STEM | 2)
        started = time.monotonic()
        with pytest.raises(ConnectionRefusedError,
                           match=f"layout version 2; this client speaks version {ld.VERSION}"):
            connect(cluster_id, 1, timeout=BOUND * 10, policy=FAST)
        assert time.monotonic() - started < BOUND * 10
    finally:
        region.close()


def _ping_pong_client(cluster_id: str, requests: int, pipe) -> None:
    client = connect(cluster_id, 1, timeout=BOUND, policy=FAST)
    try:
        for number in range(requests):
            request = b"%d" % number
            assert client.send(request, BOUND)
            response = client.recv(BOUND)
            assert response is not None, f"request {number}: no answer (lost wake-up)"
            assert bytes(response) == request[::-1]
            client.release()
        pipe.send("done")
    finally:
        client.close()


@pytest.mark.multiprocess
def test_no_request_is_lost_while_clients_and_the_broker_race_on_the_pending_flags(
        cluster_id, spawn, listener):
    """Clients in other processes, each sending its next request as soon as the answer to
    the last came: the broker only ever looks at the connections whose byte was set, so a
    wake-up lost in the flags' ordering would leave a request unanswered for good (the
    client's recv times out and it reports nothing)."""
    pipes = []
    for _ in range(3):
        parent, child = CTX.Pipe()
        spawn(_ping_pong_client, cluster_id, 1500, child)
        pipes.append(parent)
    dropped = serve_until(listener, lambda dropped: len(dropped) == len(pipes))
    assert [expect(pipe) for pipe in pipes] == ["done"] * len(pipes)
    assert len(set(dropped)) == len(pipes)
