"""Names, modes and lifecycle of the named objects; cleanup of stale ones; liveness."""
from __future__ import annotations

import os
import stat
import uuid

import posix_ipc
import pytest

from shm_ring import naming
from shm_ring.liveness import current_process, is_alive, process_start_time
from shm_ring.naming import NamedSemaphore, SharedRegion, cleanup_stale, list_objects
from shm_ring.shared_ring import SharedRing
from tests.support.other_user import OTHER_UID, as_other_user, needs_root
from tests.support.processes import CTX


@pytest.fixture
def cluster_id():
    cluster = "t" + uuid.uuid4().hex[:16]
    yield cluster
    cleanup_stale(cluster)
    assert list_objects(cluster) == []


def shm_file(name: str, semaphore: bool = False) -> str:
    return os.path.join(naming.SHM_DIRECTORY, ("sem." if semaphore else "") + name[1:])


def test_names_are_prefixed_with_ringlog_and_the_cluster_id():
    assert naming.listener_name("c1", 3) == "/ringlog.c1.b3.listener"
    assert naming.doorbell_name("c1", 3) == "/ringlog.c1.b3.doorbell"
    assert naming.object_name("c1", "b3", naming.connection_part(42, "ab12")) == \
        "/ringlog.c1.b3.c42-ab12"


@pytest.mark.parametrize("bad", ["", "a.b", "a/b", "x" * 65, "sp ace", 7])
def test_bad_cluster_ids_are_refused(bad):
    with pytest.raises(ValueError, match="cluster id"):
        naming.object_name(bad, "x")


def test_bad_name_parts_and_broker_ids_are_refused():
    with pytest.raises(ValueError, match="'../x'"):
        naming.object_name("c", "../x")
    with pytest.raises(ValueError, match="-1"):
        naming.broker_part(-1)
    with pytest.raises(ValueError, match="c<pid>-<hex token>"):
        naming.check_connection_part("c12-zz")


def test_objects_are_created_with_mode_0600(cluster_id):
    ring = SharedRing.create(cluster_id, "modes", 64)
    try:
        for path in (shm_file(ring.name), shm_file(ring.name + ".data", True),
                     shm_file(ring.name + ".space", True)):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    finally:
        ring.close()
        ring.unlink()


def test_close_and_unlink_are_distinct_and_safe_twice(cluster_id):
    name = naming.object_name(cluster_id, "region")
    region = SharedRegion.create(name, 4096)
    region.buf[:3] = b"abc"
    other = SharedRegion.open(name)
    region.unlink()
    region.unlink()
    assert not os.path.exists(shm_file(name))
    assert bytes(other.buf[:3]) == b"abc"  # unlinked, still mapped
    region.close()
    region.close()
    other.close()
    with pytest.raises(FileNotFoundError, match=name):
        SharedRegion.open(name)

    semaphore = NamedSemaphore.create(naming.object_name(cluster_id, "sem"))
    semaphore.close()
    semaphore.close()
    semaphore.unlink()
    semaphore.unlink()
    assert list_objects(cluster_id) == []


def test_close_while_a_view_is_held_leaves_the_mapping_to_the_view(cluster_id):
    region = SharedRegion.create(naming.object_name(cluster_id, "held"), 4096)
    region.buf[:2] = b"hi"
    view = region.buf[:2]
    region.close()  # does not raise although a view is alive
    assert bytes(view) == b"hi"
    region.unlink()


def test_create_refuses_an_existing_name(cluster_id):
    name = naming.object_name(cluster_id, "twice")
    region = SharedRegion.create(name, 64)
    with pytest.raises(FileExistsError, match=name):
        SharedRegion.create(name, 64)
    region.close()
    region.unlink()


def test_a_create_that_fails_halfway_undoes_itself(cluster_id):
    # The ".space" semaphore exists already: the ring and ".data" made before it go away.
    blocker = NamedSemaphore.create(naming.object_name(cluster_id, "half.space"))
    with pytest.raises(FileExistsError, match="half.space"):
        SharedRing.create(cluster_id, "half", 64)
    assert list_objects(cluster_id) == [blocker.name]
    blocker.close()
    blocker.unlink()


def test_open_of_a_missing_ring_closes_what_it_opened(cluster_id):
    ring = SharedRing.create(cluster_id, "partial", 64)
    posix_ipc.unlink_semaphore(ring.name + ".space")
    with pytest.raises(FileNotFoundError, match="partial.space"):
        SharedRing.open(cluster_id, "partial")
    ring.close()
    ring.unlink()


def _leave_objects(cluster_id: str) -> None:
    SharedRing.create(cluster_id, "left", 64)  # never closed nor unlinked
    os._exit(0)


@pytest.mark.multiprocess
def test_cleanup_stale_removes_only_that_clusters_objects(cluster_id):
    other = "o" + uuid.uuid4().hex[:16]
    keep = SharedRing.create(other, "keep", 64)
    try:
        child = CTX.Process(target=_leave_objects,
                                                            args=(cluster_id,))
        child.start()
        child.join(10)
        assert child.exitcode == 0
        base = f"/ringlog.{cluster_id}.left"
        assert cleanup_stale(cluster_id) == [base, base + ".data", base + ".space"]
        assert list_objects(cluster_id) == []
        assert cleanup_stale(cluster_id) == []
        assert len(list_objects(other)) == 3
    finally:
        keep.close()
        keep.unlink()
    assert list_objects(other) == []


def _exit_now() -> None:
    os._exit(0)


@pytest.mark.multiprocess
def test_liveness_survives_pid_reuse_and_sees_zombies():
    pid, start_time = current_process()
    assert is_alive(pid, start_time)
    assert not is_alive(pid, start_time + 1)  # same pid, another process (pid reused)
    child = CTX.Process(target=_exit_now)
    child.start()
    child_pid = child.pid
    # Until joined, the exited child is a zombie: it counts as dead.
    os.waitid(os.P_PID, child_pid, os.WEXITED | os.WNOWAIT)
    assert process_start_time(child_pid) is None
    child.join()
    assert process_start_time(child_pid) is None


@pytest.mark.multiprocess
def test_orphan_connections_of_dead_clients_are_unlinked_and_others_kept(cluster_id):
    child = CTX.Process(target=_exit_now)
    child.start()
    child.join(10)
    dead, alive = f"c{child.pid}-dead", f"c{os.getpid()}-alive"
    made = []
    for broker, part in [(1, dead), (1, f"c{child.pid}-held"), (1, alive), (2, dead)]:
        base = naming.object_name(cluster_id, f"b{broker}", part)
        made += [SharedRegion.create(base + ".req", 64),
                 NamedSemaphore.create(base + ".req.space")]
    held = {naming.object_name(cluster_id, "b1", f"c{child.pid}-held")}
    try:
        orphans = naming.unlink_orphan_connections(cluster_id, 1, held)
        base = f"/ringlog.{cluster_id}.b1.{dead}"
        assert orphans == [base + ".req", base + ".req.space"]
        kept = list_objects(cluster_id)
        assert base + ".req" not in kept and len(kept) == 6  # held, alive, broker 2's
        assert naming.unlink_orphan_connections(cluster_id, 1, held) == []
    finally:
        for made_object in made:
            made_object.unlink()
            made_object.close()


# -- other users: squatted names, namespaces ------------------------------------------------

def _squat(shm_name: str, sem_name: str) -> None:
    """What another user does: create a cluster's names first, open to all (0666)."""
    posix_ipc.SharedMemory(shm_name, posix_ipc.O_CREX, mode=0o666, size=4096).close_fd()
    posix_ipc.Semaphore(sem_name, posix_ipc.O_CREX, mode=0o666).close()


@needs_root
@pytest.mark.multiprocess
def test_a_name_another_user_made_first_is_refused_in_one_line_and_never_removed(cluster_id):
    shm_name = naming.listener_name(cluster_id, 0)
    sem_name = naming.doorbell_name(cluster_id, 0)
    assert as_other_user(_squat, shm_name, sem_name) == 0
    try:
        for attempt in (lambda: SharedRegion.create(shm_name, 4096),
                        lambda: SharedRegion.open(shm_name),
                        lambda: NamedSemaphore.create(sem_name),
                        lambda: NamedSemaphore.open(sem_name)):
            with pytest.raises(naming.SquattedNameError) as failure:
                attempt()
            path = shm_file(shm_name) if "listener" in failure.value.name else \
                shm_file(sem_name, semaphore=True)
            assert str(failure.value) == (
                f"{path} belongs to uid {OTHER_UID}, not to this user (uid {os.geteuid()}): "
                f"another user created it; ringlog will not use it (its owner or root can "
                f"remove it)")
            assert isinstance(failure.value, PermissionError)
        assert cleanup_stale(cluster_id) == []  # not ours: left alone
        assert list_objects(cluster_id) == sorted([shm_name, sem_name])
    finally:
        posix_ipc.unlink_shared_memory(shm_name)
        posix_ipc.unlink_semaphore(sem_name)


def test_a_namespace_is_the_cluster_id_and_a_token_and_a_bare_id_covers_every_start(
        cluster_id):
    token = uuid.uuid4().hex
    space = naming.namespace(cluster_id, token)
    assert space == f"{cluster_id}.{token}" and naming.cluster_of(space) == cluster_id
    assert naming.listener_name(space, 3) == f"/ringlog.{cluster_id}.{token}.b3.listener"
    with pytest.raises(ValueError, match="32-hex-digit token"):
        naming.namespace(cluster_id, "not-a-token")
    page = SharedRegion.create(naming.stats_page_name(space, os.getpid()), 4096)
    other = SharedRegion.create(naming.object_name(space, "metadata"), 4096)
    try:
        assert naming.stats_page_pid(cluster_id, page.name) == os.getpid()
        assert naming.stats_page_pid(space, page.name) == os.getpid()
        assert naming.stats_page_pid(space, other.name) is None
        assert list_objects(cluster_id) == sorted([page.name, other.name])
        assert list_objects(naming.namespace(cluster_id, "0" * 32)) == []
        # a live process's stats page stays, under any start of the cluster
        assert cleanup_stale(cluster_id) == [other.name]
    finally:
        for region in (page, other):
            region.unlink()
            region.close()
