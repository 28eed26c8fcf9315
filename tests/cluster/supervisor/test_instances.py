"""One data directory, one cluster: a copy of D (same cluster id) cannot run beside it, and
D's clients reach D's brokers only; names another user made first neither block a start nor
get removed, and one squatted anyway is one line.

Every test bounds its waits, stops what it started (``stop_cluster``, by the pids in the
data directory's files) and checks that no shared-memory object of its clusters is left.
"""
from __future__ import annotations

import os
import subprocess
import sys

import posix_ipc
import pytest

from cluster import KafkaProducer
from cluster.errors import NoBrokersAvailable
from cluster.metadata import data_dir as dd
from cluster.supervisor.cluster import Cluster
from cluster.supervisor.supervisor import ClusterStartError, stop_cluster
from cluster.tools import cli
from shm_ring import naming
from shm_ring.naming import SquattedNameError, list_objects
from tests.support.bounds import BOUND
from tests.support.other_user import OTHER_UID, as_other_user, needs_root

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = [sys.executable, os.path.join(HERE, "stand_in_broker.py")]


@pytest.fixture
def dirs(tmp_path):
    """``dirs(name)`` -> a data directory path; afterwards each is stopped and the test fails
    if any object of its cluster id is left in /dev/shm."""
    made = []

    def make(name):
        made.append(tmp_path / name)
        return made[-1]
    yield make
    ids = set()
    for path in made:
        if path.is_dir():
            stop_cluster(path, timeout=BOUND)
            ids.add(dd.read_cluster_id(path))
    left = [name for cluster_id in ids - {None} for name in list_objects(cluster_id)]
    assert left == [], f"left in /dev/shm: {left}"


def copy_of(original, copy):
    subprocess.run(["cp", "-a", str(original), str(copy)], check=True, timeout=BOUND)
    return copy


@pytest.mark.multiprocess
def test_a_copy_of_a_data_directory_is_refused_beside_its_original(dirs):
    original = dirs("d")
    Cluster(original, brokers=1, broker_command=FAKE).start().stop()
    copy = copy_of(original, dirs("d2"))
    assert dd.read_cluster_id(copy) == dd.read_cluster_id(original)
    with Cluster(original, brokers=1, broker_command=FAKE):
        cluster_id = dd.read_cluster_id(original)
        with pytest.raises(ClusterStartError) as failure:
            Cluster(copy, brokers=1, broker_command=FAKE).start()
        assert str(failure.value).startswith(
            f"cluster {cluster_id} is already running from {original} (supervisor pid "
            f"{os.getpid()}); {copy} holds the same cluster id (a copy of that directory?) "
            f"and cannot run beside it: `ringlog cluster stop --data-dir {original}` first")
        assert not os.path.exists(copy / dd.SHM_TOKEN)
        assert all(dd.read_shm_namespace(original) in name for name in list_objects(cluster_id))
    with Cluster(copy, brokers=1, broker_command=FAKE):  # the original stopped: it may run
        assert not os.path.exists(original / dd.SHM_TOKEN)


@pytest.mark.multiprocess
def test_the_clients_of_a_data_directory_never_reach_the_brokers_of_its_copy(dirs):
    original = dirs("d")
    with Cluster(original, brokers=1) as cluster:
        first = cluster.namespace
        producer = KafkaProducer(bootstrap_servers=str(original))
        producer.send("t", b"in d").get(timeout=BOUND)
        producer.close()
    copy = copy_of(original, dirs("d2"))
    with Cluster(copy, brokers=1) as cluster:
        assert cluster.namespace.startswith(dd.read_cluster_id(original) + ".")
        assert cluster.namespace != first
        with pytest.raises(NoBrokersAvailable, match=f"in {original} is not running"):
            KafkaProducer(bootstrap_servers=str(original), max_block_ms=2000).send(
                "t", b"meant for d").get(timeout=BOUND)
        producer = KafkaProducer(bootstrap_servers=str(copy))
        producer.send("t", b"in d2").get(timeout=BOUND)
        producer.close()


@pytest.mark.multiprocess
def test_a_copy_made_while_its_original_runs_does_not_lead_its_clients_to_the_original(dirs):
    original = dirs("d")
    with Cluster(original, brokers=1):
        copy = copy_of(original, dirs("d2"))  # its shm.token names the original's objects
        assert dd.read_shm_namespace(copy) == dd.read_shm_namespace(original)
        with pytest.raises(NoBrokersAvailable, match=f"in {copy} is not running"):
            KafkaProducer(bootstrap_servers=str(copy), max_block_ms=1500).send(
                "t", b"meant for d2").get(timeout=BOUND)
        producer = KafkaProducer(bootstrap_servers=str(original))
        producer.send("t", b"in d").get(timeout=BOUND)
        producer.close()


def _squat_the_old_names(cluster_id):
    """Another user pre-creates the names a cluster had before they carried a token."""
    for name in (naming.doorbell_name(cluster_id, 0),):
        posix_ipc.Semaphore(name, posix_ipc.O_CREX, mode=0o666).close()
    for name in (naming.listener_name(cluster_id, 0), naming.object_name(cluster_id,
                                                                         "metadata")):
        posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o666, size=4096).close_fd()


@needs_root
@pytest.mark.multiprocess
def test_names_squatted_by_another_user_neither_block_the_cluster_nor_get_removed(dirs):
    data_dir = dirs("d")
    Cluster(data_dir, brokers=1, broker_command=FAKE).start().stop()
    cluster_id = dd.read_cluster_id(data_dir)
    squatted = sorted([naming.doorbell_name(cluster_id, 0), naming.listener_name(cluster_id, 0),
                       naming.object_name(cluster_id, "metadata")])
    assert as_other_user(_squat_the_old_names, cluster_id) == 0
    try:
        with Cluster(data_dir, brokers=1, broker_command=FAKE) as cluster:
            assert cluster.metadata().live_brokers() == [0]
            assert cli.main(["cluster", "status", "--data-dir", str(data_dir)]) == 0
        assert cli.main(["cluster", "stop", "--data-dir", str(data_dir)]) == 0
        assert list_objects(cluster_id) == squatted  # another user's: left alone
    finally:
        posix_ipc.unlink_semaphore(squatted[0])
        for name in squatted[1:]:
            posix_ipc.unlink_shared_memory(name)


def _squat(name):
    posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o666, size=4096).close_fd()


@needs_root
@pytest.mark.multiprocess
def test_a_name_squatted_anyway_is_one_line_for_start_status_and_the_console_tools(
        dirs, monkeypatch, capsys):
    data_dir = dirs("d")
    Cluster(data_dir, brokers=1, broker_command=FAKE).start().stop()
    cluster_id = dd.read_cluster_id(data_dir)
    token = "5" * naming.TOKEN_HEX  # as if the other user had guessed this start's token
    page = naming.object_name(naming.namespace(cluster_id, token), "metadata")
    path = os.path.join(naming.SHM_DIRECTORY, page[1:])
    line = (f"{path} belongs to uid {OTHER_UID}, not to this user (uid 0): another user "
            f"created it; ringlog will not use it (its owner or root can remove it)")
    assert as_other_user(_squat, page) == 0
    try:
        monkeypatch.setattr(dd.secrets, "token_hex", lambda size: token)
        with pytest.raises(SquattedNameError) as failure:
            Cluster(data_dir, brokers=1, broker_command=FAKE).start()
        assert str(failure.value) == line
        assert not os.path.exists(data_dir / dd.SHM_TOKEN)  # the failed start undid itself
        dd.new_shm_namespace(data_dir, cluster_id)  # what its clients would read meanwhile
        capsys.readouterr()
        for argv in (["cluster", "status", "--data-dir", str(data_dir)],
                     ["console-consumer", "--bootstrap-server", str(data_dir), "--topic", "t",
                      "--timeout-ms", "100"]):
            assert cli.main(argv) == 1
            err = capsys.readouterr().err  # the consumer's "Processed ..." line may come first
            assert err.splitlines()[-1] == f"ringlog {argv[0]}: {line}" and "Traceback" not in err
        dd.remove_shm_token(data_dir)
        assert list_objects(cluster_id) == [page]
    finally:
        posix_ipc.unlink_shared_memory(page)
