"""The systems the suite measures, one module each, all with the same small interface.

A peer module defines:

``NAME``            the name shown in tables and stored in the JSON (``ringlog``, ...)
``DESCRIPTION``     one line: transport, durability, how records are sent and read
``missing(options)``  None when the peer can run here, else why not and how to fix it
``deploy(workdir, channels, brokers, options)``
                    start what the peer needs for one case (a cluster, a server, queues,
                    socket paths) under ``workdir``; returns a ``Deployment``
``produce(endpoint, task, gate)`` / ``consume(endpoint, task, gate)``
                    the client loops, each run in its own process by ``harness``

A ``Deployment`` has ``endpoint`` (picklable: handed to every client process at spawn),
``server_pids()`` (the processes whose memory the case reports, may be empty) and
``stop()`` (stops every process it started by pid and removes its files; safe twice) and
``leftovers`` (after ``stop``: the shared-memory objects the system under test left behind
and ``stop`` had to unlink; the suite reports them).

*Channels* are what records are spread over: partitions of one topic (ringlog), streams
(Redis), PUSH/PULL pipes (pyzmq), queues (multiprocessing). Each client task names the
channels it writes to or reads from (``harness.Task``).

Loaded by name (``load``) so a missing optional library (redis-py, pyzmq) only skips its
peer. Any thread may call these functions; the objects they return belong to the caller.
"""
from __future__ import annotations

import importlib

#: Peer module names, ringlog first (ratios are ringlog ÷ each of the others).
PEERS = ("ringlog", "redis_streams", "zmq_pushpull", "mp_queue", "ringlog_gateway",
         "noida_db", "tansu")
BASELINE = "ringlog"


def load(name):
    """The peer module called ``name`` (one of ``PEERS``)."""
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; expected one of {', '.join(PEERS)}")
    return importlib.import_module(f"{__name__}.{name}")


def missing(name, options):
    """None when peer ``name`` can run, else the reason (an import failure included)."""
    try:
        module = load(name)
    except ImportError as exc:
        return f"cannot import what it needs: {exc}"
    return module.missing(options)
