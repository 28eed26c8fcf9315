"""A module the zygote tests fork (``python -m tests.cluster.supervisor.zygote_child WHAT``):
``report PATH`` writes what the child sees (pid, parent, session, umask, cwd, argv, an
environment variable, whether its pidfd-holding zygote's socket leaked) to PATH and exits 0;
``exit N`` exits with N; ``sleep`` sleeps until killed; ``raise`` raises."""
from __future__ import annotations

import json
import os
import sys
import time


def main(argv):
    what = argv[0]
    if what == "report":
        umask = os.umask(0)
        os.umask(umask)
        fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
        with open(argv[1], "w") as file:
            json.dump({"pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0),
                       "umask": umask, "cwd": os.getcwd(), "argv": sys.argv,
                       "env": os.environ.get("ZYGOTE_TEST_VALUE"),
                       "fds": fds}, file)
        print("reported")
        return 0
    if what == "exit":
        return int(argv[1])
    if what == "sleep":
        while True:
            time.sleep(1)
    raise RuntimeError("asked to raise")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
