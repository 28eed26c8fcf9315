"""Requests to a data directory's supervisor about one broker: a small file per broker.

``ringlog broker start|stop|kill`` (``broker_control``) writes ``D/broker-<id>/supervisor.request``
and the supervisor's watch loop (``Supervisor.watch``) reads it:

- ``start``: spawn broker ``id`` as at cluster start; removed once the broker is spawned (or
  found running already).
- ``stop`` / ``kill`` with the broker's ``pid``: the exit of that pid is deliberate, not a
  crash (never restarted); removed once the supervisor saw that pid exit, or when it names
  a pid the supervisor does not run.

Layout: JSON ``{"action": "start"|"stop"|"kill", "pid": broker pid or null, "requested_by":
pid}``, written atomically, 0600; one per broker, the newest wins. Writers: any process;
reader and remover: the supervisor (and the writer, to see whether it was taken up).
"""
from __future__ import annotations

import os

from cluster.metadata import data_dir as dd

REQUEST_FILE = "supervisor.request"
"""In ``D/broker-<id>/``: what was asked of the supervisor about that broker."""

ACTIONS = ("start", "stop", "kill")


def request_path(data_dir, broker_id):
    return os.path.join(dd.broker_dir(data_dir, broker_id), REQUEST_FILE)


def write_request(data_dir, broker_id, action, pid=None):
    """Ask the supervisor of ``data_dir`` to ``action`` broker ``broker_id`` (see module doc)."""
    if action not in ACTIONS:
        raise ValueError(f"request action must be one of {ACTIONS}, found {action!r}")
    with dd.private_umask():
        os.makedirs(dd.broker_dir(data_dir, broker_id), mode=dd.DIR_MODE, exist_ok=True)
    dd.write_json(request_path(data_dir, broker_id),
                  {"action": action, "pid": pid, "requested_by": os.getpid()})


def read_request(data_dir, broker_id):
    """The pending request about broker ``broker_id`` ({} if none, or unreadable)."""
    try:
        request = dd.read_json(request_path(data_dir, broker_id))
    except ValueError:  # a torn or foreign file: no request
        return {}
    return request if isinstance(request, dict) and request.get("action") in ACTIONS else {}


def clear_request(data_dir, broker_id):
    """Remove the request about broker ``broker_id`` (the supervisor, once it acted)."""
    try:
        os.unlink(request_path(data_dir, broker_id))
    except FileNotFoundError:
        pass
