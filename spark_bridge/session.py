"""One local-mode SparkSession per process, set up for ringlog.

``get_spark()`` is what tests, benchmarks and the bridge process call instead of
``SparkSession.builder``: it points Spark's Python workers at this interpreter (the venv's,
which has pyarrow; without it workers fail with "No module named pyarrow"), quiets the JVM
(started by ``jvm.start_jvm``, without its incubator notice; its logging set by
``log4j2.properties`` next to this module: no start-up chatter, then errors only; and the
driver bound to 127.0.0.1, so Spark does not warn about the host name), turns the web UI
off, keeps shuffle partitions small for a 2-core host, and registers the ``ringlog`` data
source (an installed ringlog is found by PySpark itself, through ``pyspark_ringlog``, when
the workers' Python has it; registering replaces that with this process's class, so the
source works from a bare checkout too). It is idempotent: the second call returns the same
session (Spark itself allows one active SparkContext per process). A SIGINT handler the
caller installed before the first call stays installed (PySpark's SparkContext would
replace it: ``_keeping_sigint_handler``), so Ctrl-C stops the bridge as SIGTERM does.

Thread safety: call it from one thread (the driver's main thread); the returned session is
Spark's and follows Spark's rules.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

#: Spark settings every ringlog session gets; ``conf`` passed to get_spark() overrides them.
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
}

#: The JVM's logging configuration (errors only), given to the driver JVM at its start.
LOG4J2_PROPERTIES = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                 "log4j2.properties")

_lock = threading.Lock()
_registered = set()


def _point_workers_at_this_interpreter():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Workers import spark_bridge and the ringlog packages: put the tree that holds them on
    # their path (the driver may have it only through its current directory).
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root] + paths)


@contextlib.contextmanager
def _keeping_sigint_handler():
    """While inside, a SIGINT handler the caller installed survives: PySpark's SparkContext
    replaces the main thread's with one that cancels every job and raises
    KeyboardInterrupt, and that one breaks a process that stops on Ctrl-C by itself (the
    bridge: no summary, exit 130, Java errors when Spark is still starting). Python's
    default handler is left to PySpark, as a plain PySpark program has it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if previous is not signal.default_int_handler and previous is not None:
            signal.signal(signal.SIGINT, previous)


def get_spark(app_name="ringlog", master="local[2]", conf=None):
    """Return this process's SparkSession, creating it on the first call.

    ``conf`` is a dict of extra Spark settings; on later calls the existing session is
    returned unchanged (its settings are fixed once the JVM runs).
    """
    from pyspark.sql import SparkSession

    from spark_bridge.jvm import start_jvm
    from spark_bridge.source import RinglogDataSource

    with _lock:
        _point_workers_at_this_interpreter()
        settings = {"spark.master": master, "spark.app.name": app_name, **DEFAULT_CONF,
                    "spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile=file:"
                                                     f"{LOG4J2_PROPERTIES}",
                    **(conf or {})}
        start_jvm(settings)
        builder = SparkSession.builder
        for key, value in settings.items():
            builder = builder.config(key, value)
        with _keeping_sigint_handler():
            spark = builder.getOrCreate()
        context_id = spark.sparkContext.applicationId
        if context_id not in _registered:
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(RinglogDataSource)
            _registered.add(context_id)
        return spark
