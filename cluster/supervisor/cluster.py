"""``Cluster``: a whole ringlog cluster from Python, for tests and embedding.

::

    with Cluster("/tmp/d", brokers=3, auto_create_topics_enable=False) as cluster:
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
        ...
        cluster.kill_broker(1)      # SIGKILL: no shutdown at all
        cluster.start_broker(1)     # recovers its logs, serves again

Broker configuration uses Kafka's broker keys: as keyword arguments with ``_`` for ``.``
(``num_partitions=3`` is ``num.partitions``, ``log_segment_bytes=...``), or
``config={"num.partitions": 3}``; each key one way only. Keyword arguments
must be known keys (a typo raises TypeError); ``config`` follows Kafka and only logs
unknown keys (a server.properties may carry settings ringlog has no use for). Values are
checked before any process starts (InvalidConfigurationError).

The brokers are this process's children (``supervisor.Supervisor``); the data directory
is the bootstrap address (``bootstrap_servers``). Starting again on the same directory
keeps the cluster id and recovers every topic and record, with every broker the directory
knows (``Cluster(d)`` after ``Cluster(d, brokers=3)`` runs 3). One supervisor per directory:
``start()`` on a directory another supervisor (another Cluster, ``ringlog cluster start``)
holds raises DataDirInUseError naming it; a ``data_dir`` that is a file, or not this user's
to use, raises KafkaStorageError from the constructor. The directory is made 0700 and every
file in it 0600; this process's umask is changed only while the supervisor creates files.

Ownership: one thread drives a Cluster (start, stop, kill, restart); ``stop()`` is safe to
call twice and is what ``with`` calls on exit.
"""
from __future__ import annotations

import os
import time

from cluster.config.broker import BROKER_KEYS, BrokerConfig
from cluster.config.profiles import apply_profile
from cluster.metadata import data_dir as dd
from cluster.supervisor.supervisor import (
    BROKER_COMMAND,
    START_TIMEOUT,
    STOP_TIMEOUT,
    Supervisor,
    brokers_to_start,
)

_WAIT_STEP = 0.01


def broker_config_from_kwargs(config=None, **kwargs):
    """Kafka's broker keys -> values from ``config`` plus ``kwargs`` (``_`` for ``.``)."""
    props = dict(config or {})
    for name, value in kwargs.items():
        key = name.replace("_", ".")
        if key not in BROKER_KEYS:
            raise TypeError(f"unknown broker config {name!r} (as Kafka's key: {key!r}); "
                            f"known keys: {', '.join(sorted(BROKER_KEYS))}")
        if key in props:
            raise TypeError(f"broker config {key!r} given twice: {name}={value!r} and "
                            f"config[{key!r}]={props[key]!r}")
        props[key] = value
    return props


class Cluster:
    """N broker processes sharing the data directory ``data_dir`` (see the module doc).

    ``brokers``: how many (ids 0..brokers-1) in a new data directory, one if None; a data
    directory whose cluster ran before starts with all its brokers (``broker-<id>``
    directories), and ``brokers``, if given, must match their number (BrokerCountError, a
    ValueError naming both numbers, otherwise); ``start_timeout`` / ``stop_timeout``: seconds
    a broker may take to start serving / to stop after SIGTERM; ``broker_command``: the
    argv prefix that runs a broker (``python -m replica_proc``); ``profile``: a named set
    of broker settings under the given ones (``"dev"``: no fsync, small segments; UNSAFE,
    for tests only: cluster.config.profiles).
    """

    def __init__(self, data_dir, brokers=None, *, config=None, broker_command=BROKER_COMMAND,
                 start_timeout=START_TIMEOUT, stop_timeout=STOP_TIMEOUT, profile=None,
                 **kwargs):
        if brokers is not None and (not isinstance(brokers, int) or isinstance(brokers, bool)
                                    or brokers < 1):
            raise ValueError(f"brokers must be an int >= 1, found {brokers!r}")
        self.data_dir = os.path.abspath(os.fspath(data_dir))
        dd.check_data_dir(self.data_dir)  # a file, or not ours: KafkaStorageError, one line
        self.config = apply_profile(profile, broker_config_from_kwargs(config, **kwargs))
        self.start_timeout = start_timeout
        BrokerConfig(self.config, data_dir=self.data_dir)  # bad values raise here
        self._supervisor = Supervisor(self.data_dir, brokers_to_start(self.data_dir, brokers),
                                      self.config,
                                      broker_command=broker_command,
                                      start_timeout=start_timeout, stop_timeout=stop_timeout)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self):
        """Start every broker; return once all serve and the metadata page lists them."""
        self._supervisor.start()
        return self

    def stop(self):
        """Stop every broker gracefully and remove the cluster's shared memory; safe twice."""
        self._supervisor.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- brokers --------------------------------------------------------------------------------

    def kill_broker(self, broker_id):
        """SIGKILL broker ``broker_id`` (no shutdown: a crash) and reap it."""
        self._supervisor.kill_broker(broker_id)

    def start_broker(self, broker_id):
        """Start broker ``broker_id`` again; return once it serves and the page lists it."""
        self._supervisor.start_broker(broker_id)

    def pids(self):
        """{broker id: pid} of the running brokers."""
        return self._supervisor.pids()

    # -- facts ----------------------------------------------------------------------------------

    @property
    def bootstrap_servers(self):
        """What clients take as ``bootstrap_servers``: the data directory."""
        return self.data_dir

    @property
    def cluster_id(self):
        """The cluster id (from D/meta.properties; None before the first start)."""
        return self._supervisor.cluster_id

    @property
    def namespace(self):
        """The shared-memory namespace of this start (``<cluster id>.<token>``; None while
        stopped): every object of the running cluster is ``/ringlog.<namespace>.*``."""
        return self._supervisor.namespace

    @property
    def broker_ids(self):
        return list(self._supervisor.broker_ids)

    def metadata(self):
        """The newest MetadataImage on the metadata page (the cluster must be started)."""
        if self._supervisor.page is None:
            raise RuntimeError(f"cluster in {self.data_dir} is not started")
        return self._supervisor.page.read()

    def wait_for_metadata(self, predicate, timeout=START_TIMEOUT, step=_WAIT_STEP):
        """The first image for which ``predicate(image)`` is true (read every ``step``
        seconds); TimeoutError after ``timeout`` seconds, naming the last image's
        version."""
        deadline = time.monotonic() + timeout
        while True:
            image = self.metadata()
            if predicate(image):
                return image
            if time.monotonic() >= deadline:
                raise TimeoutError(f"metadata of {self.data_dir} did not satisfy {predicate!r} "
                                   f"within {timeout} s (last version {image.version}, "
                                   f"controller {image.controller_id}, live brokers "
                                   f"{image.live_brokers()})")
            time.sleep(step)

    def __repr__(self):
        return (f"Cluster({self.data_dir!r}, brokers={self.broker_ids}, "
                f"state={self._supervisor.state!r})")
