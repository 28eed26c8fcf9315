"""ringlog's pytest plugin (the ``pytest11`` entry point ``ringlog``): a Kafka-compatible
cluster for a test suite, no Docker, no ports but the gateway's (picked free).

Fixtures:

- ``ringlog_cluster``: one 1-broker cluster for the whole run (session scope), started on
  first use and shared by every test that asks for it; use ``new_topic()`` so tests do not
  meet in a topic.
- ``ringlog_cluster_factory``: ``make(brokers=1, replication_factor=None, profile="dev",
  tmpfs=False, **broker_config)`` -> a fresh, started ``TestCluster`` with its data
  directory under the test's ``tmp_path``, or with ``tmpfs=True`` in a directory of its own
  on the tmpfs ``/dev/shm`` (``harness.tmpfs_data_dir``: no disk writes at all; removed when
  the cluster is stopped); each call its own cluster; all stopped when the test ends.

Both give ``cluster.testing.harness.TestCluster``s: ``bootstrap_servers`` (ringlog's
clients), ``kafka_bootstrap`` (any Kafka client, through the gateway, started on first
access) and ``new_topic(partitions=..., replication_factor=...)``.

Under pytest-xdist every worker has its own temporary directory, hence its own clusters
(cluster ids and shared-memory names are unique per start, gateway ports are the kernel's
free ones). Teardown stops every process and unlinks the clusters' shared memory whatever
the test did: failed, interrupted (pytest tears fixtures down on KeyboardInterrupt; SIGTERM
is turned into one once a cluster runs, unless the process handles SIGTERM itself; an
``atexit`` hook stops what is still running if teardown did not), or left a client open.
A SIGKILLed test process leaves its brokers running: ``ringlog cluster stop --data-dir D``.

A failed test that used a cluster gets a report section ``ringlog broker logs`` with the
tail of each of its clusters' broker logs.
"""
from __future__ import annotations

import atexit
import signal
import threading

import pytest

from cluster.testing.harness import TestCluster, tmpfs_data_dir

SECTION = "ringlog broker logs"

_clusters_of_test = pytest.StashKey[list]()
_live = []  # every TestCluster started and not yet closed, for the atexit hook


def _interrupt_on_sigterm():
    """SIGTERM (a CI runner's timeout, ``kill``) becomes KeyboardInterrupt, so pytest tears
    the fixtures down (its brokers run in sessions of their own: nothing else stops them);
    only if nobody else handles SIGTERM in this process."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL):
        signal.signal(signal.SIGTERM, _sigterm)


def _sigterm(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process
    raise KeyboardInterrupt("SIGTERM")


def _start(data_dir, **options):
    _interrupt_on_sigterm()
    cluster = TestCluster(data_dir, **options)
    _live.append(cluster)
    try:
        cluster.start()
    except BaseException:
        _close(cluster)
        raise
    return cluster


def _close(cluster):
    try:
        cluster.close()
    finally:
        if cluster in _live:
            _live.remove(cluster)


@atexit.register
def _close_all():
    while _live:
        _close(_live[-1])


def _used_by(item, cluster):
    item.stash.setdefault(_clusters_of_test, []).append(cluster)


@pytest.fixture(scope="session")
def _ringlog_session_cluster(tmp_path_factory):
    cluster = _start(tmp_path_factory.mktemp("ringlog") / "data")
    try:
        yield cluster
    finally:
        _close(cluster)


@pytest.fixture
def ringlog_cluster(_ringlog_session_cluster, request):
    """The run's shared 1-broker cluster (a TestCluster; module doc)."""
    _used_by(request.node, _ringlog_session_cluster)
    return _ringlog_session_cluster


@pytest.fixture
def ringlog_cluster_factory(tmp_path, request):
    """``make(brokers=1, replication_factor=None, profile="dev", tmpfs=False,
    **broker_config)`` -> a new started TestCluster under ``tmp_path`` (on tmpfs with
    ``tmpfs=True``); every one stopped at the end of the test."""
    made = []

    def make(brokers=1, tmpfs=False, **options):
        data_dir = tmpfs_data_dir() if tmpfs else tmp_path / f"ringlog-{len(made)}"
        cluster = _start(data_dir, brokers=brokers, remove_data_dir=tmpfs, **options)
        made.append(cluster)
        _used_by(request.node, cluster)
        return cluster
    try:
        yield make
    finally:
        errors = []
        for cluster in reversed(made):
            try:
                _close(cluster)
            except Exception as exc:  # stop the others still; raised below
                errors.append(exc)
        if errors:
            raise errors[0]


def pytest_unconfigure(config):
    """The run is over: SIGTERM ends the process again (the fixtures are torn down)."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is _sigterm):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and call.when in ("setup", "call"):
        for cluster in item.stash.get(_clusters_of_test, ()):
            report.sections.append((f"{SECTION}: {cluster.data_dir}", cluster.broker_logs()))
    return report
