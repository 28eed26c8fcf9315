"""The garbage collector's cost in each process of a perf run (``perf.gc_bench`` puts this
folder on PYTHONPATH, so every Python process it starts imports this module first).

``gc.callbacks`` times each collection (``perf_counter_ns`` from "start" to "stop") and
counts it per generation; at exit the process writes one JSON file to
``$RINGLOG_GC_PROBE_DIR/<role>-<pid>.json``: role, pid, its wall-clock window (CLOCK_MONOTONIC,
shared by every process of the host), CPU seconds, and per generation the collections, the
objects collected and the pause nanoseconds (sum and max).

Roles: a broker (``python -m replica_proc``) writes from ``atexit`` (it exits through
``sys.exit``); the suite's client processes are forked by multiprocessing's fork server
(named ``bench-producer-N`` / ``bench-consumer-N``): the counts restart in the child
after the fork (``multiprocessing.util.register_after_fork``) and are written by a
multiprocessing finalizer, which runs before the child's ``os._exit``. Other processes
(the suite itself, the fork server) write nothing.

Experiment knobs, for an A/B in ``perf.gc_bench`` (what was adopted: README "GC and
memory"):

* ``RINGLOG_GC_PROBE_THRESHOLD0=N``: ``gc.set_threshold(N, ...)`` in every process;
* ``RINGLOG_GC_PROBE_FREEZE=1``: ``gc.freeze()`` in each client right after its fork (the
  fork server imported every library: what is alive then lives as long as the process), and
  in a broker when its request loop begins (start-up done; what brokers now do themselves,
  ``ringlog.gc.freeze``);
* ``RINGLOG_GC_PROBE_FREEZE=0``: ``gc.unfreeze()`` in a broker when its request loop begins,
  undoing ``ringlog.gc.freeze`` (the A/B's other side).

Each collection is also listed as (monotonic time, generation, pause ns), so the bench can
count what happened while the clients ran, apart from start-up. At exit the probe also
times one full collection (``gc.collect()``, after counting the tracked objects): what a
generation-2 collection costs that process, which the short runs rarely see.
"""
from __future__ import annotations

import atexit
import gc
import json
import os
import sys
import time

_DIR = os.environ.get("RINGLOG_GC_PROBE_DIR")
_state = {}


def _reset():
    _state.update(start=time.monotonic(), began=None, cpu=os.times(),
                  collections=[0, 0, 0], collected=[0, 0, 0], pause_ns=[0, 0, 0],
                  max_ns=[0, 0, 0], events=[])


def _callback(phase, info):
    if phase == "start":
        _state["began"] = time.perf_counter_ns()
        return
    began = _state["began"]
    if began is None:
        return
    pause = time.perf_counter_ns() - began
    generation = info["generation"]
    _state["collections"][generation] += 1
    _state["collected"][generation] += info["collected"]
    _state["pause_ns"][generation] += pause
    if pause > _state["max_ns"][generation]:
        _state["max_ns"][generation] = pause
    _state["events"].append((time.monotonic(), generation, pause))
    _state["began"] = None


def _write(role):
    cpu = os.times()
    gc.callbacks.remove(_callback)
    tracked = len(gc.get_objects())
    began = time.perf_counter_ns()
    gc.collect()
    full_ns = time.perf_counter_ns() - began
    record = dict(role=role, pid=os.getpid(), start=_state["start"], end=time.monotonic(),
                  cpu_s=(cpu.user - _state["cpu"].user) + (cpu.system - _state["cpu"].system),
                  threshold=gc.get_threshold(), frozen=gc.get_freeze_count(),
                  tracked=tracked, full_collection_ns=full_ns,
                  **{k: _state[k] for k in ("collections", "collected", "pause_ns", "max_ns",
                                            "events")})
    with open(os.path.join(_DIR, f"{role}-{os.getpid()}.json"), "w") as out:
        json.dump(record, out)


class _Child:
    """multiprocessing's after-fork hook (``util.register_after_fork`` holds it weakly: it
    lives in ``_state``). A child's ``_bootstrap`` clears the finalizers the parent left and
    then runs these hooks, so the finalizer registered here is the child's own."""

    def after_fork(self):
        from multiprocessing import util
        _reset()
        if os.environ.get("RINGLOG_GC_PROBE_FREEZE") == "1":
            gc.freeze()
        util.Finalize(None, self.write, exitpriority=100)

    @staticmethod
    def write():
        import multiprocessing
        name = multiprocessing.current_process().name
        if name.startswith("bench-"):
            _write(name.split("-")[1])


def _freeze_when_serving(freeze):
    """``gc.freeze()`` (or ``gc.unfreeze()``) in a broker once its start-up is done: when
    ``Broker._loop`` (the request loop) begins."""
    from replica_proc import broker

    loop = broker.Broker._loop

    def serving_loop(self, *args):
        if freeze:
            gc.freeze()
        else:
            gc.unfreeze()
        return loop(self, *args)
    broker.Broker._loop = serving_loop


def _install():
    threshold = os.environ.get("RINGLOG_GC_PROBE_THRESHOLD0")
    if threshold:
        gc.set_threshold(int(threshold), *gc.get_threshold()[1:])
    _reset()
    gc.callbacks.append(_callback)
    if "replica_proc" in sys.orig_argv:
        atexit.register(_write, "broker")
        if os.environ.get("RINGLOG_GC_PROBE_FREEZE") in ("0", "1"):
            _freeze_when_serving(os.environ["RINGLOG_GC_PROBE_FREEZE"] == "1")
    elif "forkserver" in " ".join(sys.orig_argv):
        from multiprocessing import util
        _state["child"] = child = _Child()
        util.register_after_fork(child, _Child.after_fork)


if _DIR:
    _install()
