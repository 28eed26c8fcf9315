"""The copier processes of the transactional-copy workload, by copier, and the copier
faults (``schedule.COPIER_FAULTS``) played against them.

Copier ``n`` (``copier``) runs as a sequence of incarnations 0, 1, 2, ... (each a process
of the ``multiprocessing`` spawn context, with the same transactional id); normally one
lives at a time. ``Copiers`` starts them, SIGKILLs the newest (``copier-kill``, at the
moment its step aims at: inside a transaction, or with a commit unanswered), starts a
new one beside a live one (``zombie``: the old one is the zombie the new one fences),
and, while it watches (``run``), starts a new incarnation when the newest one exits on an
error of its own or stays down after a kill past its downtime. Every action and every
exit is a line of the fault log (``{"fault": "copier-start" | "copier-kill" | "zombie" |
"copier-exit" | "skipped", "c": copier, "i": incarnation, "pid", ...}``; a kill's
``aim`` and whether it ``hit``), so the checker knows each incarnation's end. The
consumer-group workload (``group_consume``) runs its members the same way (``target``:
``workload.member``, ``kind`` "member": ``member-start``, ``member-kill``, ...).

Owner: the thread that runs ``run`` (the command's copier-fault thread), then the
command's main thread once it has returned (``heal``, ``stop``).
"""
from __future__ import annotations

import dataclasses
import json
import os
import time

from cluster.tools.chaos.copier import copy
from cluster.tools.chaos.workload import CTX, StopEvent, start_client

#: Seconds between two looks at the copier processes.
WATCH_INTERVAL = 0.1
#: Seconds an aimed kill waits for its moment (then it kills anyway), and between two
#: looks at the copier's history.
AIM_WAIT = 2.0
AIM_POLL = 0.002
#: Bytes read from the end of a history file to find its last line.
TAIL = 4096


@dataclasses.dataclass
class Incarnation:
    """One copier process: its copier, number, process and stop event."""

    copier: int
    number: int
    process: object
    stop: object
    killed: bool = False   # SIGKILLed by a fault
    reaped: bool = False   # its exit is in the fault log


class Copiers:
    """The copier processes (module doc). ``spec_of(copier, incarnation)`` makes a
    ``copier.CopierSpec``; ``fault_log`` is a ``workload.HistoryWriter``; ``on_event``
    gets each recorded event."""

    def __init__(self, copiers, spec_of, fault_log, on_event=None, target=copy,
                 kind="copier"):
        self.copiers = copiers
        self.target = target            # the process's function: (spec, stop event)
        self.kind = kind                # the fault log's names: <kind>-start, -kill, -exit
        self.spec_of = spec_of
        self.log = fault_log
        self.on_event = on_event or (lambda event: None)
        self.incarnations = []          # every one started, in order
        self.restart_at = {}            # copier -> monotonic time its kill's downtime ends
        self.error = None               # what stopped ``run`` early, if anything
        self.steps = []                 # the copier steps ``run`` has not played yet

    # -- the processes ------------------------------------------------------------------------

    def newest(self, copier):
        found = [i for i in self.incarnations if i.copier == copier]
        return found[-1] if found else None

    def start(self, copier, fault=None, **fields):
        """Start copier ``copier``'s next incarnation; record ``fault`` (default:
        ``<kind>-start``)."""
        newest = self.newest(copier)
        number = 0 if newest is None else newest.number + 1
        stop = StopEvent()
        process = CTX.Process(target=self.target, args=(self.spec_of(copier, number), stop),
                              name=f"chaos-{self.kind}-{copier}.{number}")
        start_client(process)
        self.incarnations.append(Incarnation(copier, number, process, stop))
        self._record(fault or f"{self.kind}-start", c=copier, i=number, pid=process.pid,
                     **fields)

    def kill(self, copier, aim=None):
        """SIGKILL copier ``copier``'s newest incarnation — once the last line of its
        history is an ``aim`` op (``schedule.COPIER_KILL_AIMS``), waiting up to
        ``AIM_WAIT`` seconds for it; whether it was alive."""
        newest = self.newest(copier)
        if newest is None or not newest.process.is_alive():
            return False
        hit = aim is not None and self._wait_for(newest, aim)
        newest.killed = True
        newest.process.kill()
        newest.process.join()
        self._record(f"{self.kind}-kill", c=copier, i=newest.number, pid=newest.process.pid,
                     aim=aim, hit=hit)
        newest.reaped = True
        return True

    def _wait_for(self, incarnation, op):
        """Wait until the last line of ``incarnation``'s history is an ``op``; whether it
        was within AIM_WAIT."""
        path = self.spec_of(incarnation.copier, incarnation.number).history
        deadline = time.monotonic() + AIM_WAIT
        while time.monotonic() < deadline:
            if last_op(path) == op:
                return True
            time.sleep(AIM_POLL)
        return False

    def zombie(self, copier):
        """Start a new incarnation beside the live newest one; whether there was one."""
        newest = self.newest(copier)
        if newest is None or not newest.process.is_alive():
            return False
        self.start(copier, fault="zombie", zombie=newest.number)
        return True

    def alive(self):
        return [i for i in self.incarnations if i.process.is_alive()]

    def killed_pids(self):
        """Pids of the incarnations that were SIGKILLed or failed (their shared memory
        may be left)."""
        return [i.process.pid for i in self.incarnations
                if i.killed or (i.process.exitcode not in (None, 0))]

    def reap(self):
        """Record the exits not yet recorded; start a new incarnation of a copier whose
        newest one exited on its own, or whose kill's downtime is over."""
        now = time.monotonic()
        for incarnation in self.incarnations:
            if not incarnation.reaped and not incarnation.process.is_alive():
                incarnation.process.join()
                incarnation.reaped = True
                self._record(f"{self.kind}-exit", c=incarnation.copier, i=incarnation.number,
                             pid=incarnation.process.pid, exitcode=incarnation.process.exitcode)
        for copier in range(self.copiers):
            newest = self.newest(copier)
            due = self.restart_at.get(copier, 0.0)
            if newest is not None and newest.reaped and now >= due and not newest.stop.is_set():
                self.restart_at.pop(copier, None)
                self.start(copier)

    def heal(self):
        """Start now every copier whose newest incarnation is down (the faults are over)."""
        self.restart_at.clear()
        self.reap()

    def stop(self, timeout):
        """Set every stop event, wait up to ``timeout`` seconds for them all, SIGKILL the
        rest; their exits recorded."""
        for incarnation in self.incarnations:
            incarnation.stop.set()
        deadline = time.monotonic() + timeout
        for incarnation in self.incarnations:
            incarnation.process.join(max(0.0, deadline - time.monotonic()))
            if incarnation.process.is_alive():
                incarnation.killed = True
                incarnation.process.kill()
                incarnation.process.join()
        self.reap()
        for incarnation in self.incarnations:
            incarnation.stop.close()

    # -- the faults ---------------------------------------------------------------------------

    def run(self, schedule, stop, started):
        """Play ``schedule`` (``schedule.CopierStep``s) from ``started`` (monotonic time)
        and watch the processes (``reap``) until ``stop`` (a threading.Event) is set."""
        self.steps = list(schedule)
        try:
            while not stop.wait(WATCH_INTERVAL):
                while self.steps and time.monotonic() >= started + self.steps[0].at:
                    self._play(self.steps[0])
                    self.steps.pop(0)
                self.reap()
        except Exception as exc:  # recorded, and the command reports it as a failure
            self.error = exc
            self._record("copier-fault-error", error=f"{type(exc).__name__}: {exc}")

    def pending(self):
        """Copier steps not played yet (none once ``run`` failed)."""
        return 0 if self.error is not None else len(self.steps)

    def _play(self, step):
        if step.fault.endswith("-kill"):
            # the restart waits for the downtime (``reap``)
            self.restart_at[step.copier] = time.monotonic() + step.downtime
            done = self.kill(step.copier, step.aim)
        else:
            done = self.zombie(step.copier)
        if not done:
            self._record("skipped", step=step.number, c=step.copier,
                         reason=f"{step.fault}: the copier is down")

    def _record(self, fault, **fields):
        event = self.log.write(fault=fault, **fields)
        self.on_event(event)
        return event



def last_op(path):
    """The ``op`` of the last whole line of a history file (None if there is none)."""
    try:
        with open(path, "rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - TAIL))
            lines = file.read().split(b"\n")
    except FileNotFoundError:
        return None
    if len(lines) < 2:  # the last piece is empty or a line being written
        return None
    try:
        return json.loads(lines[-2]).get("op")
    except ValueError:  # a line cut by the seek
        return None
