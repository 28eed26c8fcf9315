"""The cluster's data directory D (``bootstrap_servers``): its layout and its small files.

::

    D/meta.properties           cluster.id (22-char urlsafe base64 of a uuid4), version=1;
                                written once, by the first start
    D/supervisor.lock           flock(LOCK_EX) held by the one supervisor of D (supervisor.py)
    D/cluster.json              the supervisor's record (see supervisor.py); replaced atomically
    D/supervisor.log            output of a detached supervisor
    D/shm.token                 the running start's token (TOKEN_HEX random hex digits):
                                its shared-memory objects are named
                                /ringlog.<cluster.id>.<token>.* (shm_ring.naming), so
                                only who can read D can find them; a new one per start,
                                removed at stop; written by the supervisor
    D/controller.lock           flock(LOCK_EX) held by the active controller; each controller
                                renames a fresh generation of it into place, naming itself
                                and its epoch (replica_proc.controller.controller_lock)
    D/controller.lock.next      a generation being written, before its rename
    D/controller.takeover.lock  flock(LOCK_EX) held for the moment a generation is installed
    D/__cluster_metadata-0/     the metadata log (replica_proc.controller.metadata_log),
                                controller-only writer
    D/broker-<id>/              one broker's log dir:
        meta.properties         broker.id, cluster.id, version=0
        broker.lock             flock(LOCK_EX) held while the broker runs (broker_lock.py)
        broker.json             {"pid": .., "state": "starting|serving|stopping"}, atomic
        broker.heartbeat        the broker's last heartbeat: one int64 rewritten in place
                                by its heartbeat thread (broker_lock.py)
        broker.log              the broker process's stdout and stderr
        supervisor.request      a start/stop/kill asked of the supervisor by
                                ``ringlog broker`` (cluster.supervisor.requests)
        <topic>-<partition>/    partition logs
        __cluster_metadata-0.copy/  a copy of the metadata log's segments, written by the
                                active controller (replica_proc.controller.metadata_copies)

Files are written as Kafka writes its checkpoints: to ``<name>.tmp``, fsynced, renamed over
``<name>``, directory fsynced — a reader sees the old file or the new one, never a mix.
Both meta.properties are read strictly (``read_meta_properties``): ASCII, ``#`` comments
and ``key=value`` lines of their known keys only, each once, with well-formed values;
anything else raises KafkaStorageError naming the file, the line and what was found, and
the broker (or supervisor) refuses to start with that one line.

Everything in D is its owner's alone: directories 0700, files 0600 (segments are the
users' records; a lock file others can open is a lock others can hold). The supervisor and
broker processes run under ``PRIVATE_UMASK`` (``set_private_umask``), which covers the files
``segments`` creates with its own modes; a program embedding ``Cluster`` keeps its umask,
and the supervisor creates files inside ``private_umask()`` only. ``make_data_dir`` creates
D 0700; ``check_data_dir`` turns a D that is a file, or not this user's to use, into one
KafkaStorageError line. As ssh does with keys, a D owned by another user, or writable by
group or others, is refused (naming its path, owner and mode): whoever may write D may swap
its brokers' directories, or the token its clients trust.

Pure functions over paths: any thread may call them; each file has one writer (named above).
"""
from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import secrets
import stat
import threading
import uuid

from cluster.errors import InconsistentClusterIdError, KafkaStorageError
from segments.checkpoint import write_atomically
from shm_ring.naming import TOKEN_HEX, namespace

log = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"
SUPERVISOR_LOCK = "supervisor.lock"
CLUSTER_JSON = "cluster.json"
SUPERVISOR_LOG = "supervisor.log"
SHM_TOKEN = "shm.token"
CONTROLLER_LOCK = "controller.lock"
CONTROLLER_LOCK_NEXT = "controller.lock.next"
CONTROLLER_TAKEOVER_LOCK = "controller.takeover.lock"
METADATA_LOG_DIR = "__cluster_metadata-0"
BROKER_LOCK = "broker.lock"
BROKER_JSON = "broker.json"
BROKER_HEARTBEAT = "broker.heartbeat"
BROKER_LOG = "broker.log"
#: The Kafka wire gateway's record (its pid and the TCP port of each broker id) and log.
GATEWAY_JSON = "gateway.json"
GATEWAY_LOG = "gateway.log"
GATEWAY_LOCK = "gateway.lock"

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

PRIVATE_UMASK = 0o077
"""The umask under which D's files and directories are made: no bits for group or others."""

DIR_MODE = 0o700
FILE_MODE = 0o600

_BROKER_DIR = re.compile(r"broker-(0|[1-9][0-9]*)")
_UMASK_LOCK = threading.Lock()  # guards the scoped umask changes of private_umask()


# -- private files -----------------------------------------------------------------------------

def set_private_umask():
    """Make this whole process create private files (the broker and supervisor processes,
    first thing): ``PRIVATE_UMASK`` added to the current umask. Returns the old umask."""
    old = os.umask(PRIVATE_UMASK)
    os.umask(old | PRIVATE_UMASK)
    return old


@contextlib.contextmanager
def private_umask():
    """Files and directories created inside are private, in any process (an embedding
    program's umask is restored on exit). The umask is per process: other threads creating
    files meanwhile get it too, so this wraps the few calls that create files, never a wait;
    nested or concurrent uses are serialized."""
    with _UMASK_LOCK:
        old = os.umask(PRIVATE_UMASK)
        try:
            os.umask(old | PRIVATE_UMASK)
            yield
        finally:
            os.umask(old)


# -- the data directory itself --------------------------------------------------------------

def check_data_dir(data_dir, writable=True):
    """Raise KafkaStorageError (one line naming D and what is wrong) unless ``data_dir`` is a
    directory this user owns, that group and others cannot write, and that this user may
    read (and, with ``writable``, write), or does not exist yet."""
    try:
        st = os.stat(data_dir)
    except FileNotFoundError:
        return
    except OSError as exc:  # a path component is a file, a loop, no search permission
        raise KafkaStorageError(f"data directory {data_dir} cannot be used: "
                                f"{exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise KafkaStorageError(f"data directory {data_dir} is not a directory (it is a "
                                f"{_file_kind(st.st_mode)}); give a directory, or a path "
                                f"that does not exist yet")
    check_private(data_dir, st)
    need = os.R_OK | os.X_OK | (os.W_OK if writable else 0)
    if not os.access(data_dir, need):
        raise KafkaStorageError(
            f"data directory {data_dir} is not {'writable' if writable else 'readable'} by "
            f"uid {os.getuid()} (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})")


def check_private(data_dir, st=None):
    """KafkaStorageError (naming D, its owner and mode, as ssh names a key file) unless the
    existing directory ``data_dir`` is this user's and not writable by group or others."""
    st = os.stat(data_dir) if st is None else st
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.geteuid():
        raise KafkaStorageError(
            f"data directory {data_dir} is owned by uid {st.st_uid}, not by this user (uid "
            f"{os.geteuid()}; mode {mode:04o}): another user could swap its brokers; use a "
            f"directory of your own")
    if mode & 0o022:
        raise KafkaStorageError(
            f"data directory {data_dir} (owner uid {st.st_uid}) is mode {mode:04o}: "
            f"writable by {_WRITERS[mode & 0o022]}, who could swap its brokers; `chmod 700 "
            f"{data_dir}` to use it")


_WRITERS = {0o022: "group and others", 0o020: "group", 0o002: "others"}


def _file_kind(mode):
    for test, kind in ((stat.S_ISREG, "regular file"), (stat.S_ISLNK, "symbolic link"),
                       (stat.S_ISFIFO, "named pipe"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return kind
    return f"file of mode {mode:o}"


def make_data_dir(data_dir):
    """Create D (and missing parents) with mode 0700, or check the existing one.

    An existing D open to group or others is tightened to 0700 when it is this user's and
    holds a cluster already (an older ringlog made it 0755) or nothing yet; any other
    directory (``--data-dir $HOME``) keeps its mode, with a warning: the entries ringlog
    makes in it are private anyway. KafkaStorageError naming D if it cannot be used.
    """
    check_data_dir(data_dir)
    try:
        with private_umask():
            os.makedirs(data_dir, mode=DIR_MODE)
        return
    except FileExistsError:
        pass
    except OSError as exc:
        raise KafkaStorageError(f"data directory {data_dir} cannot be created: "
                                f"{exc.strerror}") from None
    check_data_dir(data_dir)  # it may have appeared meanwhile, as a file
    st = os.stat(data_dir)
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o077:
        return
    ours = st.st_uid == os.geteuid()
    if ours and (not os.listdir(data_dir)
                 or os.path.exists(os.path.join(data_dir, META_PROPERTIES))):
        os.chmod(data_dir, DIR_MODE)
        log.warning("data directory %s was mode %04o; made it %04o", data_dir, mode, DIR_MODE)
    else:
        log.warning("data directory %s is mode %04o: other users can list it (the files "
                    "ringlog makes in it are private); `chmod 700 %s` to close it",
                    data_dir, mode, data_dir)


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


def uuid_of(text):
    """The ``uuid.UUID`` of an id ``new_uuid`` made (as Kafka's wire format carries topic
    ids), or None if ``text`` is not one."""
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (ValueError, TypeError):
        return None
    return uuid.UUID(bytes=raw) if len(raw) == 16 else None


def text_of(value):
    """The text form (``new_uuid``'s) of a ``uuid.UUID``."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


# -- atomic small files ------------------------------------------------------------------------

def write_json(path, value, durable=True):
    """Replace ``path`` with ``value`` as JSON, atomically, private; ``durable=False``: no
    fsync (a cluster that does not fsync, ``ringlog.fsync=false``)."""
    with private_umask():
        write_atomically(path, (json.dumps(value, indent=1, sort_keys=True) + "\n").encode(),
                         durable=durable)


def read_json(path):
    """The JSON value in ``path``, or None if there is no such file."""
    try:
        with open(path, "rb") as file:
            return json.loads(file.read())
    except FileNotFoundError:
        return None


def write_properties(path, props, comment):
    lines = [f"#{comment}"] + [f"{key}={value}" for key, value in props.items()]
    with private_umask():
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
    """The data directory's cluster id: read it, or make one and write meta.properties
    (creating D 0700 if need be)."""
    make_data_dir(data_dir)
    cluster_id = read_cluster_id(data_dir)
    if cluster_id is None:
        cluster_id = new_uuid()
        write_properties(os.path.join(os.fspath(data_dir), META_PROPERTIES),
                         {"cluster.id": cluster_id, "version": CLUSTER_META_VERSION},
                         "ringlog cluster metadata: written once, by the first start")
    return cluster_id


# -- the start token: the shared-memory namespace of a running cluster ------------------------

_TOKEN = re.compile(rf"[0-9a-f]{{{TOKEN_HEX}}}\n?")


def new_shm_namespace(data_dir, cluster_id, durable=True):
    """Make a fresh random token for this start of the cluster, write ``D/shm.token``
    (0600, atomically) and return the namespace ``<cluster_id>.<token>`` (the supervisor,
    at start, holding the supervisor lock). ``durable=False``: not fsynced (a cluster that
    does not fsync, ``ringlog.fsync=false``)."""
    token = secrets.token_hex(TOKEN_HEX // 2)
    with private_umask():
        write_atomically(os.path.join(os.fspath(data_dir), SHM_TOKEN), (token + "\n").encode(),
                         durable=durable)
    return namespace(cluster_id, token)


def remove_shm_token(data_dir):
    """Remove ``D/shm.token`` (the cluster stopped); nothing if there is none."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(os.fspath(data_dir), SHM_TOKEN))


def read_shm_namespace(data_dir, cluster_id=None):
    """The shared-memory namespace of the cluster in D: ``<cluster.id>.<token>`` while a
    supervisor's start runs, the bare cluster id without a token (a broker started on its
    own), None before the first start. Checks D first (``check_data_dir``: a D another user
    may write could hand out another token); KafkaStorageError naming ``D/shm.token`` if it
    is not one token."""
    check_data_dir(data_dir, writable=False)
    cluster_id = read_cluster_id(data_dir) if cluster_id is None else cluster_id
    if cluster_id is None:
        return None
    path = os.path.join(os.fspath(data_dir), SHM_TOKEN)
    try:
        with open(path, "rb") as file:
            data = file.read(TOKEN_HEX + 2)
    except FileNotFoundError:
        return cluster_id
    text = data.decode("ascii", "replace")
    if not _TOKEN.fullmatch(text):
        raise KafkaStorageError(f"{path}: {text!r} is not one token of {TOKEN_HEX} hex "
                                f"digits; the file is damaged (a cluster start writes a new "
                                f"one)")
    return namespace(cluster_id, text.strip())


def instance_of(data_dir):
    """``(st_dev, st_ino)`` of D: which directory it is, whatever path names it. A copy is
    another instance; brokers put it in their listeners and clients check it on connect
    (``shm_ring.connect(instance=...)``)."""
    st = os.stat(data_dir)
    return st.st_dev, st.st_ino


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
