"""Fixtures shared by test folders: a fresh cluster id whose shared-memory objects must all be
gone at the end (``cluster_id``), a process starter that kills by pid (``spawn``), and fake
brokers served by threads of the test process for the clients' tests (``fake_cluster``:
the producer, the client, the admin client, the consumer and the Spark source's readers).

Folder-specific fixtures are in each folder's conftest.py; helpers that are not fixtures
are in tests/support: the one ``wait_for`` (waits) and its bounds, the fake clock, the
two environments of broker tests (``broker.BrokerEnv``: a broker process;
``handlers.HandlerEnv``: a request handler in the test process), fakes, the property
tests' example counts, the process context."""
from __future__ import annotations

import os
import signal
import uuid

import pytest

from shm_ring.naming import cleanup_stale, list_objects
from tests.support.bounds import BOUND
from tests.support.fake_broker import FakeCluster
from tests.support.processes import CTX

#: Seconds each test file took in a measured run of the suite (its tests' setup, call and
#: teardown summed), heaviest first: ``pytest --record-file-costs`` writes it. Only to order
#: files; a file it does not list is estimated from its tests' markers (COST_BY_MARKER).
FILE_COSTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "file_costs.txt")
#: The Spark configuration of the JVMs the tests start (the JIT's first tier only: why in
#: the file), unless SPARK_CONF_DIR is set; every process the tests start inherits it.
SPARK_CONF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support",
                              "spark_conf")
#: The test files whose tests use ``spark``, the SparkSession each worker process starts once
#: (tests/spark_bridge/conftest.py): ``make test`` has one worker run them all (a unit of work,
#: like one file), so one JVM starts for them instead of one per worker that gets one. A file
#: that uses the fixture must be listed (collection says so).
SPARK_SESSION_FILES = frozenset(f"tests/spark_bridge/{name}.py" for name in (
    "test_demo_failure", "test_sink_batch", "test_sink_stream", "test_source_batch",
    "test_source_leader_moves", "test_source_read_committed", "test_source_stream"))
SPARK_SESSION_UNIT = "the tests of the Spark session"
#: Rough seconds a test costs, by its heaviest marker (setup.cfg): only to order files.
COST_BY_MARKER = (("spark", 8.0), ("slow", 5.0), ("multiprocess", 1.5))
UNMARKED_COST = 0.05


def pytest_addoption(parser):
    parser.addoption("--record-file-costs", action="store_true",
                     help="write the seconds each test file took to tests/file_costs.txt "
                          "(files this run did not run keep their line)")


def _cost(item):
    return next((cost for marker, cost in COST_BY_MARKER if item.get_closest_marker(marker)),
                UNMARKED_COST)


def _file_of(item_or_report):
    """The test file of a test item or report, as its node id names it (from the rootdir)."""
    return item_or_report.nodeid.split("::")[0]


def _recorded_costs():
    """{file path relative to the repository: seconds} from FILE_COSTS ({} without it)."""
    try:
        with open(FILE_COSTS, encoding="utf-8") as file:
            lines = [line.split() for line in file if line.strip() and not line.startswith("#")]
    except FileNotFoundError:
        return {}
    return {path: float(seconds) for seconds, path in lines}


def _unit_of(path):
    """The unit of work of ``make test``'s scheduler a test file belongs to: the file, or
    SPARK_SESSION_UNIT for the files that share the Spark session."""
    return SPARK_SESSION_UNIT if path in SPARK_SESSION_FILES else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (``make test``): whole files to a worker, as pytest-xdist's
    loadfile does, except that the files of SPARK_SESSION_FILES go together."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesAndTheSparkSession(LoadFileScheduling):
        def _split_scope(self, nodeid):
            return _unit_of(super()._split_scope(nodeid))

    return FilesAndTheSparkSession(config, log)


def pytest_collection_modifyitems(config, items):
    """Units of work (a file, or the files of the Spark session) in decreasing cost
    (FILE_COSTS, else estimated from markers), each file's tests in their order, when
    pytest-xdist's workers run the tests: Longest Processing Time first. ``make test``
    gives each worker whole units (``--dist loadfile``, pytest_xdist_make_scheduler) in
    this order (``--no-loadscope-reorder``: xdist's own order, by number of tests, put the
    few-test Spark and e2e files last, run by one worker alone), so the workers end
    together. xdist's workers see ``--dist no`` (the controller schedules: the check
    ``config.option.dist == "loadfile"`` this hook made before never held there, and the
    files ran in pytest's order), hence the check for a worker; a run without workers
    keeps pytest's order. Fails the collection if a file that uses the ``spark`` fixture is
    not in SPARK_SESSION_FILES."""
    unlisted = {_file_of(item) for item in items
                if "spark" in item.fixturenames} - SPARK_SESSION_FILES
    if unlisted:
        raise pytest.UsageError(f"{', '.join(sorted(unlisted))} use the spark fixture: add "
                                f"them to SPARK_SESSION_FILES in tests/conftest.py")
    if not hasattr(config, "workerinput"):
        return
    estimated = {}
    for item in items:
        estimated[_file_of(item)] = estimated.get(_file_of(item), 0.0) + _cost(item)
    recorded = _recorded_costs()
    costs = {}
    for path, cost in estimated.items():
        costs[_unit_of(path)] = costs.get(_unit_of(path), 0.0) + recorded.get(path, cost)
    order = {unit: rank for rank, unit in enumerate(costs)}
    items.sort(key=lambda item: (-costs[_unit_of(_file_of(item))],
                                 order[_unit_of(_file_of(item))]))


class _FileCostRecorder:
    """``--record-file-costs``: sums the durations of every test report per file, in the
    process that receives all reports (xdist's controller, or pytest without workers), and
    writes FILE_COSTS at the end."""

    def __init__(self):
        self.seconds = {}

    def pytest_runtest_logreport(self, report):
        path = _file_of(report)
        self.seconds[path] = self.seconds.get(path, 0.0) + report.duration

    def pytest_sessionfinish(self, session):
        costs = {path: seconds for path, seconds in _recorded_costs().items()
                 if os.path.exists(os.path.join(session.config.rootpath, path))}
        costs.update(self.seconds)
        with open(FILE_COSTS, "w", encoding="utf-8") as file:
            file.write("# seconds per test file (pytest --record-file-costs), heaviest "
                       "first: only to order files (tests/conftest.py)\n")
            for path, seconds in sorted(costs.items(), key=lambda kv: (-kv[1], kv[0])):
                file.write(f"{seconds:.1f} {path}\n")


def pytest_configure(config):
    os.environ.setdefault("SPARK_CONF_DIR", SPARK_CONF_DIR)
    if config.getoption("record_file_costs") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_FileCostRecorder(), "ringlog-file-costs")


@pytest.fixture
def cluster_id():
    """A unique cluster id; the test must leave none of its objects in /dev/shm."""
    cluster = "k" + uuid.uuid4().hex[:16]
    yield cluster
    leftovers = cleanup_stale(cluster)
    assert list_objects(cluster) == []
    assert leftovers == [], f"test left {leftovers}"


@pytest.fixture
def spawn():
    """Start ``target(*args)`` in a forked process; SIGKILL whatever still runs at the end.
    Tests that use it start processes: mark them ``multiprocess``."""
    started = []

    def start(target, *args):
        process = CTX.Process(target=target, args=args, daemon=True)
        process.start()
        started.append(process)
        return process
    yield start
    for process in started:
        if process.is_alive():
            os.kill(process.pid, signal.SIGKILL)
        process.join(BOUND)


@pytest.fixture
def fake_cluster(tmp_path):
    """``make(brokers=2, **options)`` -> a FakeCluster (tests/support/fake_broker.py), closed
    at the end of the test, which fails if a client left shared-memory objects behind."""
    made = []

    def make(brokers=2, **options):
        cluster = FakeCluster(tmp_path / f"data-{len(made)}", brokers, **options)
        made.append(cluster)
        return cluster
    yield make
    leftovers = [name for cluster in made for name in cluster.close()]
    assert leftovers == [], f"clients left {leftovers}"


@pytest.fixture(autouse=True)
def _process_role_restored():
    """A test that declares this process's stats role (``set_process_role``: the Spark
    source's ``open_consumer`` declares "spark-reader") would otherwise leave it to every
    later test of the session, and to the processes they fork."""
    from cluster.stats.publisher import process_role, set_process_role

    declared = process_role()
    yield
    set_process_role(*(declared or (None,)))
