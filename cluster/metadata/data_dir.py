"""The cluster's data directory D (``bootstrap_servers``): its layout and its small files.

::

    D/meta.properties           cluster.id (22-char urlsafe base64 of a uuid4), version=1;
                                written once, by the first start
    D/cluster.json              the supervisor's record (see supervisor.py); replaced atomically
    D/supervisor.log            output of a detached supervisor
    D/controller.lock           flock(LOCK_EX) held by the active controller (controller.py)
    D/__cluster_metadata-0/     the metadata log (replica_proc.controller.metadata_log),
                                controller-only writer
    D/broker-<id>/              one broker's log dir:
        meta.properties         broker.id, cluster.id, version=0
        broker.lock             flock(LOCK_EX) held while the broker runs (broker_lock.py)
        broker.json             {"pid": .., "state": "starting|serving|stopping"}, atomic
        broker.log              the broker process's stdout and stderr
        <topic>-<partition>/    partition logs

Files are written as Kafka writes its checkpoints: to ``<name>.tmp``, fsynced, renamed over
``<name>``, directory fsynced — a reader sees the old file or the new one, never a mix.
Both meta.properties are read strictly (``read_meta_properties``): ASCII, ``#`` comments
and ``key=value`` lines of their known keys only, each once, with well-formed values;
anything else raises KafkaStorageError naming the file, the line and what was found, and
the broker (or supervisor) refuses to start with that one line.

Pure functions over paths: any thread may call them; each file has one writer (named above).
"""
from __future__ import annotations

import base64
import json
import logging
import os
import re
import uuid

from cluster.errors import InconsistentClusterIdError, KafkaStorageError
from segments.checkpoint import write_atomically

META_PROPERTIES = "meta.properties"
CLUSTER_JSON = "cluster.json"
SUPERVISOR_LOG = "supervisor.log"
CONTROLLER_LOCK = "controller.lock"
METADATA_LOG_DIR = "__cluster_metadata-0"
BROKER_LOCK = "broker.lock"
BROKER_JSON = "broker.json"
BROKER_LOG = "broker.log"

#: broker.json states, in the order a broker goes through them.
STATE_STARTING = "starting"
STATE_SERVING = "serving"
STATE_STOPPING = "stopping"

#: meta.properties versions: the data directory's (Kafka KRaft's v1) and a broker's.
CLUSTER_META_VERSION = 1
BROKER_META_VERSION = 0

_CLUSTER_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: The keys each meta.properties may hold, and the form of their values.
CLUSTER_META_KEYS = {"cluster.id": _CLUSTER_ID,
                     "version": re.compile(re.escape(str(CLUSTER_META_VERSION)))}
BROKER_META_KEYS = {"broker.id": re.compile(r"0|[1-9][0-9]{0,9}"), "cluster.id": _CLUSTER_ID,
                    "version": re.compile(re.escape(str(BROKER_META_VERSION)))}

log = logging.getLogger(__name__)

_BROKER_DIR = re.compile(r"broker-(0|[1-9][0-9]*)")


def broker_dir(data_dir, broker_id):
    """``D/broker-<id>``."""
    if not isinstance(broker_id, int) or isinstance(broker_id, bool) or broker_id < 0:
        raise ValueError(f"broker id must be an int >= 0, found {broker_id!r}")
    return os.path.join(os.fspath(data_dir), f"broker-{broker_id}")


def broker_ids(data_dir):
    """Ids of the ``broker-<id>`` directories under ``data_dir``, in order."""
    try:
        entries = os.scandir(data_dir)
    except FileNotFoundError:
        return []
    with entries:
        found = [int(m.group(1)) for e in entries
                 if (m := _BROKER_DIR.fullmatch(e.name)) and e.is_dir()]
    return sorted(found)


def new_uuid():
    """A new id as Kafka's ``Uuid.randomUuid`` makes cluster and topic ids: a uuid4 in
    urlsafe base64 without padding (22 characters), never starting with "-" (it would read
    as an option on a command line)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


# -- atomic small files ------------------------------------------------------------------------

def write_json(path, value):
    write_atomically(path, (json.dumps(value, indent=1, sort_keys=True) + "\n").encode())


def read_json(path):
    """The JSON value in ``path``, or None if there is no such file."""
    try:
        with open(path, "rb") as file:
            return json.loads(file.read())
    except FileNotFoundError:
        return None


def write_properties(path, props, comment):
    lines = [f"#{comment}"] + [f"{key}={value}" for key, value in props.items()]
    write_atomically(path, ("\n".join(lines) + "\n").encode())


def read_meta_properties(path, keys):
    """The ``key=value`` pairs of the meta.properties at ``path``, or None if there is no
    such file. ``keys`` maps each key the file may hold to a pattern its value must match
    (CLUSTER_META_KEYS, BROKER_META_KEYS); which keys are required is the caller's check.

    Strict: the file is ASCII; each line is empty (the end), a ``#`` comment or
    ``key=value`` with a known key, given once, and a matching value. Anything else raises
    KafkaStorageError naming the file, the line and what was found.
    """
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return None
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise KafkaStorageError(
            f"{path}: byte {data[exc.start]:#04x} at position {exc.start} is not ASCII; "
            f"the file is damaged") from None
    props = {}
    for number, line in enumerate(text.split("\n"), start=1):
        if not line or line.startswith("#"):
            continue
        key, equals, value = line.partition("=")
        pattern = keys.get(key)
        if not equals or pattern is None or key in props or not pattern.fullmatch(value):
            raise KafkaStorageError(
                f"{path} line {number}: {line!r}, expected one of "
                f"{', '.join(f'{k}=<{p.pattern}>' for k, p in keys.items())}, each once; "
                f"the file is damaged")
        props[key] = value
    return props


# -- the cluster id ---------------------------------------------------------------------------

def read_cluster_id(data_dir):
    """The cluster id in ``D/meta.properties``, or None before the first start."""
    props = read_meta_properties(os.path.join(os.fspath(data_dir), META_PROPERTIES),
                                 CLUSTER_META_KEYS)
    if props is None:
        return None
    cluster_id = props.get("cluster.id")
    if not cluster_id:
        raise InconsistentClusterIdError(
            f"{os.path.join(data_dir, META_PROPERTIES)} has no cluster.id (found keys "
            f"{sorted(props)})")
    return cluster_id


def ensure_cluster_id(data_dir):
    """The data directory's cluster id: read it, or make one and write meta.properties."""
    os.makedirs(data_dir, exist_ok=True)
    cluster_id = read_cluster_id(data_dir)
    if cluster_id is None:
        cluster_id = new_uuid()
        write_properties(os.path.join(os.fspath(data_dir), META_PROPERTIES),
                         {"cluster.id": cluster_id, "version": CLUSTER_META_VERSION},
                         "ringlog cluster metadata: written once, by the first start")
    return cluster_id


def ensure_broker_meta(data_dir, broker_id, cluster_id):
    """Check (or write, the first time) ``D/broker-<id>/meta.properties``.

    InconsistentClusterIdError naming both ids if the directory belongs to another cluster
    (Kafka refuses to start such a broker the same way).
    """
    path = os.path.join(broker_dir(data_dir, broker_id), META_PROPERTIES)
    props = read_meta_properties(path, BROKER_META_KEYS)
    if props is None:
        write_properties(path, {"broker.id": broker_id, "cluster.id": cluster_id,
                                "version": BROKER_META_VERSION},
                         "ringlog broker metadata")
        return
    if props.get("cluster.id") != cluster_id or props.get("broker.id") != str(broker_id):
        raise InconsistentClusterIdError(
            f"{path} says cluster.id={props.get('cluster.id')!r} broker.id="
            f"{props.get('broker.id')!r}, expected cluster.id={cluster_id!r} (of "
            f"{os.path.join(os.fspath(data_dir), META_PROPERTIES)}) broker.id={broker_id!r}")


def read_broker_state(data_dir, broker_id):
    """``D/broker-<id>/broker.json`` ({"pid", "state"}), or None if there is none.

    A damaged file (not JSON, or not exactly an int ``pid`` and a known ``state``) is
    logged as a WARNING naming it and read as None, like a missing one: the broker rewrites
    it whole when it starts, and until then nobody may count it as serving.
    """
    path = os.path.join(broker_dir(data_dir, broker_id), BROKER_JSON)
    try:
        state = read_json(path)
    except ValueError as exc:  # not UTF-8, or not JSON
        log.warning("%s is damaged (%s); reading it as no state", path, exc)
        return None
    if state is not None and not (
            isinstance(state, dict) and state.keys() == {"pid", "state"}
            and type(state["pid"]) is int
            and state["state"] in (STATE_STARTING, STATE_SERVING, STATE_STOPPING)):
        log.warning("%s is damaged: %r, expected {\"pid\": <int>, \"state\": <%s|%s|%s>}; "
                    "reading it as no state", path, state, STATE_STARTING, STATE_SERVING,
                    STATE_STOPPING)
        return None
    return state


def write_broker_state(data_dir, broker_id, state, pid=None):
    """Replace ``D/broker-<id>/broker.json`` (the broker process only)."""
    if state not in (STATE_STARTING, STATE_SERVING, STATE_STOPPING):
        raise ValueError(f"broker state must be {STATE_STARTING!r}, {STATE_SERVING!r} or "
                         f"{STATE_STOPPING!r}, found {state!r}")
    write_json(os.path.join(broker_dir(data_dir, broker_id), BROKER_JSON),
               {"pid": os.getpid() if pid is None else pid, "state": state})
