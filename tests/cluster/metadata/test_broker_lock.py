"""The data directory's files and broker liveness through flock."""
from __future__ import annotations

import os
import re
import signal

import pytest

from cluster.errors import InconsistentClusterIdError
from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import broker_is_alive, register_broker
from tests.support.bounds import BOUND
from tests.support.processes import CTX


def test_cluster_ids_are_kafka_style_and_written_once(tmp_path):
    ids = {dd.new_uuid() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", i) and not i.startswith("-") for i in ids)
    data_dir = tmp_path / "d"
    assert dd.read_cluster_id(data_dir) is None
    first = dd.ensure_cluster_id(data_dir)
    assert dd.ensure_cluster_id(data_dir) == first == dd.read_cluster_id(data_dir)
    text = (data_dir / "meta.properties").read_text()
    assert f"cluster.id={first}\n" in text and "version=1\n" in text


def test_meta_properties_without_a_cluster_id_is_refused(tmp_path):
    (tmp_path / "meta.properties").write_text("version=1\n")
    with pytest.raises(InconsistentClusterIdError, match="has no cluster.id"):
        dd.read_cluster_id(tmp_path)


def test_broker_ids_are_the_broker_directories(tmp_path):
    for name in ("broker-0", "broker-12", "broker-x", "broker-01", "__cluster_metadata-0"):
        (tmp_path / name).mkdir()
    (tmp_path / "broker-3").write_text("a file")
    assert dd.broker_ids(tmp_path) == [0, 12]
    assert dd.broker_ids(tmp_path / "missing") == []
    with pytest.raises(ValueError, match="broker id must be an int >= 0, found -1"):
        dd.broker_dir(tmp_path, -1)


def test_register_holds_the_lock_and_writes_state(tmp_path):
    assert not broker_is_alive(tmp_path, 4)
    with register_broker(tmp_path, 4, "cid") as registration:
        assert broker_is_alive(tmp_path, 4)
        assert dd.read_broker_state(tmp_path, 4) == {"pid": os.getpid(), "state": "starting"}
        registration.set_state(dd.STATE_SERVING)
        assert dd.read_broker_state(tmp_path, 4)["state"] == "serving"
        with pytest.raises(ValueError, match="broker state must be"):
            registration.set_state("dancing")
        with pytest.raises(BlockingIOError, match=f"broker 4 is already running: .*broker.lock "
                                                  f"is held by pid {os.getpid()} \\(command "):
            register_broker(tmp_path, 4, "cid", timeout=0.05)
    assert not broker_is_alive(tmp_path, 4)
    props = dd.read_meta_properties(os.path.join(dd.broker_dir(tmp_path, 4), "meta.properties"),
                                    dd.BROKER_META_KEYS)
    assert props == {"broker.id": "4", "cluster.id": "cid", "version": "0"}


def test_a_broker_directory_of_another_cluster_is_refused(tmp_path):
    register_broker(tmp_path, 1, "first").close()
    with pytest.raises(InconsistentClusterIdError,
                       match="says cluster.id='first' broker.id='1', expected "
                             "cluster.id='second'"):
        register_broker(tmp_path, 1, "second")
    assert not broker_is_alive(tmp_path, 1)  # the failed registration let go


def hold(data_dir, pipe):
    register_broker(data_dir, 2, "cid")
    pipe.send("held")
    pipe.recv()


@pytest.mark.multiprocess
def test_the_probe_sees_a_killed_broker_die_and_a_replaced_lock_file(tmp_path):
    ours, theirs = CTX.Pipe()
    process = CTX.Process(target=hold, args=(tmp_path, theirs))
    process.start()
    try:
        assert ours.poll(BOUND) and ours.recv() == "held"
        assert broker_is_alive(tmp_path, 2)
        os.kill(process.pid, signal.SIGKILL)
        process.join(BOUND)
        assert not broker_is_alive(tmp_path, 2)
        lock = os.path.join(dd.broker_dir(tmp_path, 2), dd.BROKER_LOCK)
        os.remove(lock)
        assert not broker_is_alive(tmp_path, 2)
        with register_broker(tmp_path, 2, "cid"):  # a new lock file
            assert broker_is_alive(tmp_path, 2)
    finally:
        if process.is_alive():
            os.kill(process.pid, signal.SIGKILL)
        process.join(BOUND)


@pytest.mark.parametrize("content", [
    b'{\n "pid": 3042,\nU"state": "serving"\n}\n',   # a flipped byte: not JSON any more
    b'{\n "pid": 3042,\n "state": "serving"\n}\xff',  # not UTF-8
    b'{\n "pid": 3042,\n "state": "servinf"\n}\n',   # JSON, but no known state
    b'{\n "pid": "3042",\n "state": "serving"\n}\n',
])
def test_a_damaged_broker_json_reads_as_no_state_with_a_warning(tmp_path, caplog, content):
    register_broker(tmp_path, 2, "cid").close()
    path = os.path.join(dd.broker_dir(tmp_path, 2), dd.BROKER_JSON)
    with open(path, "wb") as f:
        f.write(content)
    assert dd.read_broker_state(tmp_path, 2) is None
    assert f"{path} is damaged" in caplog.text
    register_broker(tmp_path, 2, "cid").close()  # a start rewrites it whole
    assert dd.read_broker_state(tmp_path, 2) == {"pid": os.getpid(), "state": "starting"}
