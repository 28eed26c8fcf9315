"""The zygote: a pre-imported Python process that forks brokers, so a broker's start skips the
interpreter's start and its imports (about half a second of CPU each on this machine).

A supervisor whose broker command is ``python -m MODULE [args]`` (the default,
``python -m replica_proc``) ``fork``s brokers from this process's zygote of MODULE
(``shared(MODULE)``) instead of exec'ing a new interpreter per broker; so does the Kafka
wire gateway (``gateway_process``, ``python -m cluster.tools.gateway_cmd``). The forked child
runs ``MODULE`` as ``python -m`` would (``runpy``, ``sys.argv`` = the broker's arguments),
so it is the same broker: same arguments, same config, same files, own pid.

Two processes, one socket (AF_UNIX, SOCK_SEQPACKET: one message per packet, JSON, file
descriptors alongside with SCM_RIGHTS):

- the **zygote** (``python -m cluster.supervisor.zygote MODULE``, in a session of its own
  so a terminal's Ctrl-C reaches only the supervisor) imports ``MODULE`` and its
  ``__main__``, checks it runs one thread only (a fork after threads is unsafe: OpenBLAS is
  held to one thread with ``OPENBLAS_NUM_THREADS=1``; a module that starts a thread at
  import makes the zygote refuse, and the supervisor execs brokers as before), runs the
  garbage collector and ``gc.freeze()``s what it imported (so forked brokers do not copy
  those pages by collecting them), says ``ready``, then serves requests until the socket
  closes. A ``spawn`` request carries the broker's arguments and umask and, as descriptors,
  its log file (stdout and stderr) and an optional ready pipe; the zygote forks, answers
  ``{"pid"}`` with a pidfd of the child, and when the child exits (its pidfd readable)
  reaps it and sends ``{"exit": pid, "returncode"}`` (Popen's: negative for a signal).
- the **child** leaves the zygote behind at once: a session of its own (as an exec'd broker:
  ``start_new_session``); the umask, working directory and environment the supervisor has
  at the spawn (the environment sent as changes to the zygote's); stdin ``/dev/null``,
  stdout and stderr to its log; a new interpreter's signal handlers; the zygote's socket and
  pidfds closed; ``RINGLOG_FORKED_AT`` (``time.monotonic()`` of the fork) in its environment
  for its start-up timing line (and ``RINGLOG_READY_FD``, the ready pipe, if one came); then
  ``runpy.run_module(MODULE, run_name="__main__")``; its exit status is ``sys.exit``'s;
  ``atexit`` handlers run and output is flushed before ``os._exit``. Its command line
  (``ps``, ``/proc/<pid>/cmdline``) is the broker's, ``python -m MODULE args``, written over
  room the zygote's own command line keeps for it (``CMDLINE_ROOM``).

What a forked broker does not share with an exec'd one: the modules are those the zygote
imported when it started; its hash seed is the zygote's. A ``sys.path`` / PYTHONPATH changed
since is not seen until the zygote is replaced (a new process, or ``close_shared()``). Code
changed on disk is: before each fork the zygote compares the modification times and sizes of
the source files of ringlog's packages (and MODULE's) it imported with those it loaded, and
answers ``{"stale"}`` instead of forking when one differs (an upgrade, then ``ringlog broker
stop``/``start`` of one broker, as a Kafka operator rolls a cluster); ``fork`` then replaces
the zygote and forks from the new one, so a restarted broker runs the code on disk.

Killing the zygote kills no broker (they run in their own sessions and are reparented) and
leaves no shared memory (it creates none). The supervisor's handle on a broker
(``ForkedProcess``, Popen's interface) holds the broker's pidfd, so it still sees the
broker exit and signals exactly that process; only the exit status is lost when the zygote
died first (``returncode`` is then ``EXIT_UNKNOWN``). The next spawn starts a new zygote.
The zygote exits when its supervisor process closes the socket or dies.

Ownership: ``shared(module)`` is one Zygote per module per process (the pid that made it: a
forked supervisor makes its own), started on first use; a lock serializes its socket between
threads. The zygote process itself is single-threaded.
"""
from __future__ import annotations

import atexit
import ctypes
import gc
import importlib
import json
import logging
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

ZYGOTE_MODULE = "cluster.supervisor.zygote"
"""This module's name, as ``python -m`` runs it (``__name__`` is then ``__main__``)."""

log = logging.getLogger("cluster.supervisor.supervisor")

MAX_MESSAGE = 64 * 1024
"""Largest message either side sends (a spawn request: the broker's arguments)."""

READY_TIMEOUT = 60.0
"""Seconds a zygote may take to import its module and say ``ready``."""

EXIT_UNKNOWN = 255
"""``ForkedProcess.returncode`` of a broker that exited after its zygote: not our child, so
its exit status is the kernel's secret."""

CMDLINE_ROOM = 4096
"""Bytes of padding the zygote's command line carries, so that a child can write its own
command line (``python -m MODULE args``: what ``ps`` and ``/proc/<pid>/cmdline`` show, as for
an exec'd broker) over it; a longer one is cut."""

FORKED_AT_ENV = "RINGLOG_FORKED_AT"
"""Environment variable of a forked child: ``time.monotonic()`` when it was forked."""

READY_FD_ENV = "RINGLOG_READY_FD"
"""The descriptor a broker writes its ready byte to (``replica_proc.__main__`` reads it)."""

ENABLE_ENV = "RINGLOG_ZYGOTE"
"""``RINGLOG_ZYGOTE=0`` in the environment: supervisors exec every broker and gateway
(``python -m ...``) instead of forking them from a zygote."""


class ZygoteUnavailable(RuntimeError):
    """The zygote could not start or died; the caller execs the broker instead."""


class ZygoteStale(ZygoteUnavailable):
    """The zygote's code changed on disk since it imported it; nothing was forked."""


OWN_PACKAGES = ("cluster", "replica_proc", "segments", "shm_ring", "consumer_proc",
                "spark_bridge")
"""ringlog's top-level packages: their imported source files are the zygote's code stamp."""


def code_stamp(module):
    """(path, mtime_ns, size) of the source file of every imported module of ringlog's
    packages and of ``module``'s: what a fork would run, as it was on disk when read."""
    roots = {*OWN_PACKAGES, module.partition(".")[0]}
    stamp = []
    for name, loaded in list(sys.modules.items()):
        path = getattr(loaded, "__file__", None)
        if path and name.partition(".")[0] in roots:
            try:
                st = os.stat(path)
                stamp.append((path, st.st_mtime_ns, st.st_size))
            except OSError:
                stamp.append((path, None, None))
    return sorted(stamp)


# -- the wire: one JSON message per packet, descriptors alongside ---------------------------

def send(sock, message, fds=()):
    socket.send_fds(sock, [json.dumps(message).encode()], list(fds))


def recv(sock):
    """(message, fds), or (None, []) at end of file."""
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 4)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), fds


# -- the zygote process --------------------------------------------------------------------------

def _threads():
    return len(os.listdir("/proc/self/task"))


def set_cmdline(argv):
    """Write ``argv`` over this process's command line (the bytes /proc/self/cmdline shows,
    ``arg_start`` to ``arg_end`` of /proc/self/stat), zero-padded, cut to fit."""
    with open("/proc/self/stat", "rb") as file:
        fields = file.read().rsplit(b")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # fields 48 and 49 of proc(5)
    data = b"\0".join(os.fsencode(arg) for arg in argv)[:end - start - 1]
    ctypes.memmove(start, data.ljust(end - start, b"\0"), end - start)


def serve(module, sock):
    """The zygote's life (see the module doc): preload, say ready, fork on request."""
    try:
        importlib.import_module(module)
        try:
            importlib.import_module(f"{module}.__main__")
        except ModuleNotFoundError as exc:
            if exc.name != f"{module}.__main__":
                raise
        if _threads() != 1:
            raise ZygoteUnavailable(f"importing {module} started {_threads() - 1} thread(s); "
                                    f"forking would be unsafe")
    except BaseException as exc:
        send(sock, {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    gc.collect()
    gc.freeze()
    stamp = code_stamp(module)
    set_cmdline([sys.executable, "-m", ZYGOTE_MODULE, module])  # the padding out of sight
    send(sock, {"ready": os.getpid()})
    children = {}  # pidfd -> pid
    while True:
        readable, _, _ = select.select([sock, *children], [], [])
        for fd in readable:
            if fd is sock:
                message, fds = recv(sock)
                if message is None:
                    return 0  # the supervisor is gone: so is the zygote, never its brokers
                changed = _changed(stamp, code_stamp(module))
                if changed is not None:
                    for fd in fds:
                        os.close(fd)
                    send(sock, {"stale": changed})
                    continue
                pid, pidfd = _fork(module, message, fds, sock, children)
                send(sock, {"pid": pid}, [pidfd])
                children[pidfd] = pid
            else:
                pid = children.pop(fd)
                _, status = os.waitpid(pid, 0)
                os.close(fd)
                send(sock, {"exit": pid, "returncode": os.waitstatus_to_exitcode(status)})


def _changed(loaded, now):
    """The first source file that differs between two code stamps, or None."""
    if loaded == now:
        return None
    before = {path: rest for path, *rest in loaded}
    for path, *rest in now:
        if before.get(path) != rest:
            return path
    return loaded[0][0] if loaded else "?"


def _fork(module, request, fds, sock, children):
    """Fork a child that runs ``module``; in the parent (pid, pidfd), fds closed."""
    log_fd, ready_fd = fds[0], (fds[1] if len(fds) > 1 else None)
    pid = os.fork()
    if pid == 0:
        _child(module, request, log_fd, ready_fd, sock, children)  # never returns
    for fd in fds:
        os.close(fd)
    return pid, os.pidfd_open(pid)


def _child(module, request, log_fd, ready_fd, sock, children):
    code = 1
    try:
        forked_at = time.monotonic()
        sock.close()
        for pidfd in children:
            os.close(pidfd)
        os.setsid()
        os.umask(request["umask"])
        os.chdir(request["cwd"])
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a new interpreter
        for key in request.get("unset", ()):
            os.environ.pop(key, None)
        os.environ.update(request.get("env", {}))
        os.environ[FORKED_AT_ENV] = repr(forked_at)
        if ready_fd is not None:
            os.environ[READY_FD_ENV] = str(ready_fd)
        sys.argv = [module, *request["args"]]
        set_cmdline([sys.executable, "-m", module, *request["args"]])
        # runpy runs the code afresh as __main__, as `python -m` does: a package's __main__,
        # or a plain module, is not under its own name in sys.modules then
        preloaded = sys.modules.get(module)
        sys.modules.pop(module if not hasattr(preloaded, "__path__") else
                        f"{module}.__main__", None)
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads OpenBLAS
    sock = socket.socket(fileno=int(argv[1]))
    try:
        return serve(argv[0], sock)
    except (BrokenPipeError, ConnectionResetError):  # its supervisor went while it imported
        return 0  # (a tool stopped by Ctrl-C at once): nothing to fork for, nor to say


# -- the supervisor's side ----------------------------------------------------------------------

class Zygote:
    """The supervisor's end of one zygote process of ``module`` (module doc). ``start()``
    forks nothing yet: the zygote imports in the background while the caller goes on;
    the first ``spawn`` waits for it to be ready."""

    def __init__(self, module):
        self.module = module
        self.owner_pid = os.getpid()
        self._lock = threading.Lock()
        self._sock = None
        self.process = None
        self.ready = False
        self.closed = False
        self._exits = {}  # pid -> returncode, reported by the zygote
        self._env = {}  # the zygote's environment

    def start(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            env = self._env = dict(os.environ, OPENBLAS_NUM_THREADS=os.environ.get(
                "OPENBLAS_NUM_THREADS", "1"))
            self.process = subprocess.Popen(
                [sys.executable, "-m", ZYGOTE_MODULE, self.module, str(theirs.fileno()),
                 "#" * CMDLINE_ROOM],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, env=env,
                start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.set_inheritable(False)
        self._sock = ours
        return self

    @property
    def pid(self):
        return None if self.process is None else self.process.pid

    def alive(self):
        return not self.closed and self.process is not None and self.process.poll() is None

    def spawn(self, args, log_fd, umask, ready_fd=None, timeout=READY_TIMEOUT):
        """Fork a broker running ``python -m module *args``: its ForkedProcess.
        ZygoteUnavailable if the zygote failed or died (nothing was started)."""
        with self._lock:
            if not self.ready:
                self._wait_ready(timeout)
            fds = [log_fd] + ([] if ready_fd is None else [ready_fd])
            try:
                env = {k: v for k, v in os.environ.items() if self._env.get(k) != v}
                unset = [k for k in self._env if k not in os.environ
                         and k != "OPENBLAS_NUM_THREADS"]
                send(self._sock, {"args": list(args), "umask": umask, "cwd": os.getcwd(),
                                  "env": env, "unset": unset}, fds)
                while True:
                    message, got = self._recv(timeout)
                    if "pid" in message:
                        return ForkedProcess(self, message["pid"], got[0], args)
                    if "stale" in message:
                        raise ZygoteStale(f"{message['stale']} changed on disk since the "
                                          f"zygote of {self.module} imported it")
            except OSError as exc:
                self._lost()
                raise ZygoteUnavailable(f"zygote of {self.module} (pid {self.pid}) is gone: "
                                        f"{exc}") from None

    def _wait_ready(self, timeout):
        message, _ = self._recv(timeout)
        if "ready" not in message:
            self._lost()
            raise ZygoteUnavailable(f"zygote of {self.module} could not start: "
                                    f"{message.get('error')}")
        self.ready = True

    def _recv(self, timeout):
        """The next message that is not an exit report (those are recorded); OSError on end
        of file or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._sock], [], [], remaining)[0]:
                raise TimeoutError(f"zygote of {self.module} did not answer in {timeout} s")
            message, fds = recv(self._sock)
            if message is None:
                raise ConnectionResetError(f"zygote of {self.module} closed its socket")
            if "exit" in message:
                self._exits[message["exit"]] = message["returncode"]
                continue
            return message, fds

    def collect(self, timeout=0.0):
        """Record the exit reports that arrive within ``timeout`` seconds (after the first,
        only those already there); notices a zygote that is gone."""
        if not self._lock.acquire(timeout=max(timeout, 0.001)):
            return  # another thread is in spawn(): it records them
        try:
            wait = timeout
            while self._sock is not None and select.select([self._sock], [], [], wait)[0]:
                message, fds = recv(self._sock)
                for fd in fds:
                    os.close(fd)
                if message is None:
                    self._lost()
                elif "exit" in message:
                    self._exits[message["exit"]] = message["returncode"]
                wait = 0.0
        except OSError:
            self._lost()
        finally:
            self._lock.release()

    def exit_of(self, pid):
        return self._exits.pop(pid, None)

    def _lost(self):
        """The zygote is gone (or useless): close our end; brokers keep running."""
        self.closed = True
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def close(self):
        """Close the socket: the zygote exits (its brokers do not); reap it."""
        self._lost()
        if self.process is not None:
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __repr__(self):
        return f"Zygote({self.module!r}, pid={self.pid}, ready={self.ready})"


class ForkedProcess:
    """A broker forked by a zygote, with the part of ``subprocess.Popen``'s interface the
    supervisor uses (``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``, ``kill``,
    ``terminate``). The pidfd it holds names exactly this process, so a signal never reaches
    another that got its pid; the exit status comes from the zygote that reaped it
    (``EXIT_UNKNOWN`` if the zygote died first)."""

    def __init__(self, zygote, pid, pidfd, args):
        self.zygote = zygote
        self.pid = pid
        self.args = list(args)
        self.returncode = None
        self._pidfd = pidfd

    def _exited(self, timeout=0.0):
        """Whether the process has exited (pidfd readable) within ``timeout`` seconds."""
        return bool(select.select([self._pidfd], [], [], timeout)[0])

    def poll(self):
        if self.returncode is None and self._exited():
            self._settle(READY_TIMEOUT)
        return self.returncode

    def _settle(self, timeout):
        """The process has exited: wait (bounded) for its zygote's report."""
        deadline = time.monotonic() + timeout
        while True:
            code = self.zygote.exit_of(self.pid)
            if code is None and (self.zygote.closed or time.monotonic() >= deadline):
                code = EXIT_UNKNOWN
            if code is not None:
                break
            self.zygote.collect(0.05)
        self.returncode = code
        os.close(self._pidfd)
        self._pidfd = None

    def wait(self, timeout=None):
        if self.returncode is None:
            if not self._exited(timeout):
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._settle(READY_TIMEOUT)
        return self.returncode

    def send_signal(self, sig):
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass  # exited meanwhile, not yet reaped

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def __repr__(self):
        return f"ForkedProcess(pid={self.pid}, returncode={self.returncode})"


# -- one zygote per module per process ------------------------------------------------------------

_shared = {}  # module -> Zygote (of this pid)
_shared_lock = threading.Lock()


def shared(module):
    """This process's zygote of ``module``, started if there is none or it died."""
    with _shared_lock:
        zygote = _shared.get(module)
        if zygote is None or zygote.owner_pid != os.getpid() or not zygote.alive():
            if zygote is not None and zygote.owner_pid == os.getpid():
                zygote.close()
            zygote = _shared[module] = Zygote(module).start()
        return zygote


def replace_shared(module):
    """Close this process's zygote of ``module`` (its brokers go on); the next ``shared``
    starts a new one."""
    with _shared_lock:
        zygote = _shared.pop(module, None)
        if zygote is not None and zygote.owner_pid == os.getpid():
            zygote.close()


def pids():
    """Pids of this process's running zygotes: helpers that live as long as this process
    (a check for processes a test left running leaves them out)."""
    with _shared_lock:
        return {z.pid for z in _shared.values() if z.owner_pid == os.getpid() and z.alive()}


@atexit.register
def close_shared():
    """Close this process's zygotes (they exit; the brokers they forked do not)."""
    with _shared_lock:
        for module, zygote in list(_shared.items()):
            if zygote.owner_pid == os.getpid():
                zygote.close()
            del _shared[module]


def enabled():
    """Whether processes may be forked from zygotes: not with ``RINGLOG_ZYGOTE=0``, nor
    without pidfds (Linux 5.3)."""
    return os.environ.get(ENABLE_ENV, "1").strip() != "0" and hasattr(os, "pidfd_open")


def warm(command):
    """Start this process's zygote for ``command`` now (it imports while the caller goes
    on), if ``command`` is one a zygote forks."""
    module = zygote_module(command)
    if module is not None and enabled():
        try:
            shared(module)
        except OSError as exc:
            log.warning("cannot start a zygote of %s: %s", module, exc)


def fork(command, output, ready_fd=None):
    """The process ``command`` (``[this python, "-m", MODULE, *args]``) runs, forked by this
    process's zygote of MODULE, output to the descriptor ``output``, with this process's
    umask, working directory and environment: a ForkedProcess. None if ``command`` is not
    such a command, zygotes are off (``RINGLOG_ZYGOTE=0``), or the zygote is unavailable
    (logged): the caller execs the command then."""
    module = zygote_module(command)
    if module is None or not enabled():
        return None
    umask = os.umask(0o077)
    os.umask(umask)
    try:
        try:
            return shared(module).spawn(command[3:], output, umask, ready_fd)
        except ZygoteStale as exc:
            log.info("a new zygote of %s: %s", module, exc)
            replace_shared(module)
            return shared(module).spawn(command[3:], output, umask, ready_fd)
    except (ZygoteUnavailable, OSError) as exc:
        log.warning("starting %s without a zygote: %s", module, exc)
        return None


def zygote_module(command):
    """MODULE if ``command`` is ``[this python, "-m", MODULE, ...]`` (a zygote can fork it),
    else None."""
    if len(command) >= 3 and command[0] == sys.executable and command[1] == "-m":
        return command[2]
    return None


if __name__ == "__main__":
    sys.exit(main())
