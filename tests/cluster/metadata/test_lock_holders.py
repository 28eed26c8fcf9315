"""A refused flock names its holder from /proc/locks: the live process, or words that name
no pid, never the possibly dead pid in broker.json."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time

import pytest

from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import register_broker
from cluster.metadata.lock_holders import (
    COMMAND_CHARS,
    UNSEEN,
    command_line,
    describe_process,
    flock_holder_pids,
)
from tests.support.bounds import BOUND
from tests.support.processes import CTX


def test_proc_locks_holders_are_flock_lines_of_the_file_not_waiters(tmp_path):
    target = tmp_path / "x.lock"
    target.write_bytes(b"")
    st = os.stat(target)
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    locks = tmp_path / "locks"
    locks.write_text(
        f"1: FLOCK  ADVISORY  READ 101 {device}:{st.st_ino} 0 EOF\n"
        f"1: -> FLOCK  ADVISORY  WRITE 102 {device}:{st.st_ino} 0 EOF\n"
        f"2: POSIX  ADVISORY  WRITE 103 {device}:{st.st_ino} 0 EOF\n"
        f"3: FLOCK  ADVISORY  WRITE 104 {device}:{st.st_ino + 1} 0 EOF\n"
        f"4: FLOCK  ADVISORY  READ 0 {device}:{st.st_ino} 0 EOF\n")
    assert flock_holder_pids(str(target), str(locks)) == [101, 0]
    assert flock_holder_pids(str(tmp_path / "missing"), str(locks)) == []


def dead_pid():
    """The pid of a child that has exited and been reaped."""
    process = CTX.Process(target=os._exit, args=(0,))
    process.start()
    process.join(BOUND)
    return process.pid


def test_a_holder_that_is_not_running_is_never_named():
    gone = dead_pid()
    assert describe_process(gone) == UNSEEN
    assert describe_process(0) == UNSEEN
    assert str(gone) not in UNSEEN
    assert describe_process(os.getpid()).startswith(f"pid {os.getpid()} (command ")


@pytest.mark.multiprocess
def test_a_command_line_is_one_line_and_short():
    script = "import time\ntime.sleep(60)  # " + "x" * 200
    process = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + BOUND
        while "time.sleep" not in command_line(process.pid):  # until it has exec'd
            assert time.monotonic() < deadline
            time.sleep(0.01)
        text = command_line(process.pid)
        assert text.startswith(f"{sys.executable} -c import time\\ntime.sleep(60)  # xxx")
        assert len(text) == COMMAND_CHARS and text.endswith("...") and "\n" not in text
    finally:
        process.kill()
        process.wait(BOUND)


def hold_shared(path, pipe, uid=None):
    """Take a shared flock on ``path`` (as ``uid`` if given: opened first, then setuid), say
    so, and keep it until told."""
    fd = os.open(path, os.O_RDONLY)
    if uid is not None:
        os.setgid(uid)
        os.setuid(uid)
    fcntl.flock(fd, fcntl.LOCK_SH)
    pipe.send("held")
    pipe.recv()


@pytest.mark.multiprocess
@pytest.mark.parametrize("who", ["same user", "another user"])
def test_a_refused_broker_lock_names_its_holder_not_the_pid_in_broker_json(tmp_path, who):
    if who == "another user" and os.geteuid() != 0:
        pytest.skip("only root can start a process of another user")
    register_broker(tmp_path, 0, "cid").close()
    gone = dead_pid()
    dd.write_broker_state(tmp_path, 0, dd.STATE_STOPPING, pid=gone)
    lock = os.path.join(dd.broker_dir(tmp_path, 0), dd.BROKER_LOCK)
    ours, theirs = CTX.Pipe()
    uid = 65534 if who == "another user" else None
    process = CTX.Process(target=hold_shared, args=(lock, theirs, uid))
    process.start()
    try:
        assert ours.poll(BOUND) and ours.recv() == "held"
        with pytest.raises(BlockingIOError) as failure:
            register_broker(tmp_path, 0, "cid", timeout=0.05)
        message = str(failure.value)
        assert message.startswith(f"broker 0 is already running: {lock} is held by ")
        if who == "same user":
            assert f"held by pid {process.pid} (command " in message
        else:
            assert "held by a process of another user (uid 65534" in message
            assert f"pid {process.pid})" in message
        assert f"pid {gone}" not in message
    finally:
        ours.send("done")
        process.join(BOUND)
        if process.is_alive():
            os.kill(process.pid, 9)
            process.join(BOUND)
