"""The data directory is its owner's (0700 / 0600, under a scoped umask), and a data
directory that is a file, not this user's, or writable by others, is one KafkaStorageError
line; its shm.token names each start's shared-memory namespace."""
from __future__ import annotations

import os
import stat

import pytest

from cluster.errors import KafkaStorageError
from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import register_broker
from tests.support.other_user import OTHER_UID, needs_root


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask_022():
    """The usual umask of a user's shell for the test; theirs again afterwards."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def current_umask():
    old = os.umask(0)
    os.umask(old)
    return old


def test_the_data_directory_and_its_files_are_private_and_the_umask_is_restored(
        tmp_path, umask_022):
    data_dir = tmp_path / "parent" / "d"
    dd.ensure_cluster_id(data_dir)
    register_broker(data_dir, 0, dd.read_cluster_id(data_dir)).close()
    dd.write_json(str(data_dir / dd.CLUSTER_JSON), {"state": "stopped"})
    assert current_umask() == 0o022
    assert mode(tmp_path / "parent") == 0o700
    for root, _, files in os.walk(data_dir):
        assert mode(root) == 0o700, root
        for name in files:
            assert mode(os.path.join(root, name)) == 0o600, name
    assert sorted(os.listdir(dd.broker_dir(data_dir, 0))) == [
        "broker.json", "broker.lock", "meta.properties"]


def test_an_existing_cluster_directory_is_tightened_and_a_foreign_one_only_warned(
        tmp_path, umask_022, caplog):
    old_cluster = tmp_path / "old"
    old_cluster.mkdir(mode=0o755)
    (old_cluster / dd.META_PROPERTIES).write_text("cluster.id=abc\nversion=1\n")
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o755)
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    (home / "notes.txt").write_text("the user's")
    for path in (old_cluster, empty, home):
        dd.make_data_dir(str(path))
    assert (mode(old_cluster), mode(empty), mode(home)) == (0o700, 0o700, 0o755)
    assert f"data directory {home} is mode 0755: other users can list it" in caplog.text
    assert f"data directory {old_cluster} was mode 0755; made it 0700" in caplog.text


def test_a_data_directory_that_is_a_file_is_one_line(tmp_path):
    path = tmp_path / "file"
    path.write_text("not a directory")
    for call in (dd.check_data_dir, dd.make_data_dir, dd.ensure_cluster_id):
        with pytest.raises(KafkaStorageError) as failure:
            call(str(path))
        assert str(failure.value) == (
            f"[Error 56] data directory {path} is not a directory (it is a "
            f"regular file); give a directory, or a path that does not exist yet")
    with pytest.raises(KafkaStorageError, match=f"data directory {path}/d cannot be used: "
                                                f"Not a directory"):
        dd.check_data_dir(str(path / "d"))
    assert path.read_text() == "not a directory"


def test_a_directory_the_user_cannot_write_is_refused(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root may write any directory")
    path = tmp_path / "ro"
    path.mkdir(mode=0o500)
    with pytest.raises(KafkaStorageError, match=f"data directory {path} is not writable by "
                                                f"uid {os.getuid()} .*mode 0500"):
        dd.check_data_dir(str(path))
    dd.check_data_dir(str(path), writable=False)


@pytest.mark.parametrize("open_mode, writers", [(0o777, "group and others"),
                                                (0o770, "group"), (0o703, "others")])
def test_a_data_directory_others_can_write_is_refused_naming_owner_and_mode(
        tmp_path, open_mode, writers):
    path = tmp_path / "open"
    path.mkdir()
    path.chmod(open_mode)
    expected = (f"[Error 56] data directory {path} (owner uid {os.geteuid()}) is mode "
                f"{open_mode:04o}: writable by {writers}, who could swap its brokers; "
                f"`chmod 700 {path}` to use it")
    for call in (dd.check_data_dir, dd.make_data_dir, dd.ensure_cluster_id,
                 dd.read_shm_namespace):
        with pytest.raises(KafkaStorageError) as failure:
            call(str(path))
        assert str(failure.value) == expected
    assert mode(path) == open_mode and os.listdir(path) == []


@needs_root
def test_a_data_directory_of_another_user_is_refused(tmp_path):
    path = tmp_path / "theirs"
    path.mkdir(mode=0o700)
    os.chown(path, OTHER_UID, OTHER_UID)
    for call in (dd.check_data_dir, dd.ensure_cluster_id, dd.read_shm_namespace):
        with pytest.raises(KafkaStorageError) as failure:
            call(str(path))
        assert str(failure.value) == (
            f"[Error 56] data directory {path} is owned by uid {OTHER_UID}, not by this user "
            f"(uid 0; mode 0700): another user could swap its brokers; use a directory of "
            f"your own")


def test_each_start_token_names_a_namespace_of_its_own_and_stop_removes_it(tmp_path):
    data_dir = str(tmp_path / "d")
    assert dd.read_shm_namespace(data_dir) is None  # no cluster yet
    cluster_id = dd.ensure_cluster_id(data_dir)
    assert dd.read_shm_namespace(data_dir) == cluster_id  # no start: the bare id
    first = dd.new_shm_namespace(data_dir, cluster_id)
    assert first.startswith(cluster_id + ".") and dd.read_shm_namespace(data_dir) == first
    assert mode(os.path.join(data_dir, dd.SHM_TOKEN)) == 0o600
    second = dd.new_shm_namespace(data_dir, cluster_id)
    assert second != first and dd.read_shm_namespace(data_dir) == second
    dd.remove_shm_token(data_dir)
    assert dd.read_shm_namespace(data_dir) == cluster_id
    token = os.path.join(data_dir, dd.SHM_TOKEN)
    with open(token, "w") as file:
        file.write("../../etc\n")
    with pytest.raises(KafkaStorageError, match=f"{token}: '../../etc\\\\n' is not one token "
                                                f"of 32 hex digits; the file is damaged"):
        dd.read_shm_namespace(data_dir)
