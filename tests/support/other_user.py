"""Another local user, for the access tests: ``as_other_user(fn, *args)`` runs ``fn`` in a
forked child that switched to ``OTHER_UID`` (nobody) and returns its exit code (0: ``fn``
returned). Only root can switch, so tests that need it use the ``other_user`` mark's
condition: skipped, with the reason, when the tests do not run as root."""
from __future__ import annotations

import os
import signal
import time
import traceback

import pytest

from tests.support.bounds import BOUND

OTHER_UID = 65534
"""nobody."""

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason=f"acting as another local user needs root (os.setuid); the "
                              f"tests run as uid {os.geteuid()}")


def as_other_user(fn, *args) -> int:
    """Run ``fn(*args)`` as OTHER_UID in a forked child, wait (bounded) and return its exit
    code; the child is SIGKILLed by pid if it outlives the bound."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            os.umask(0)
            fn(*args)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    for _ in range(int(BOUND / 0.01)):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"the process of uid {OTHER_UID} (pid {pid}) did not end within "
                         f"{BOUND} s")
