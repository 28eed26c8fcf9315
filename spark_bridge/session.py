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
import stat
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


#: The launcher Spark's Python workers run (``_worker_launcher``): this interpreter, with
#: PySpark's zips taken off the workers' path when they are the installed PySpark's own.
_LAUNCHER = """#!/bin/sh
# Written by ringlog's spark_bridge.session: Spark's Python workers on {python},
# importing the PySpark installed there (with its bytecode) instead of the zips in {lib},
# which Spark puts first on their path. From a zip every worker compiles PySpark anew
# (~1 s of CPU), and a streaming source's worker must connect back within Spark's fixed
# 10 s: on a loaded 2-core machine it did not.
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
  case "$entry" in
    {lib_pattern}) ;;
    *) kept="${{kept:+$kept:}}$entry" ;;
  esac
done
unset IFS
PYTHONPATH=$kept
export PYTHONPATH
exec {python_word} "$@"
"""


def _worker_launcher():
    """The path of the workers' launcher script (``_LAUNCHER``), written once per
    interpreter and PySpark into a directory of this user's under the temporary directory
    (kept: the next session uses it again); this interpreter itself when PySpark has no
    zips (a Spark of its own under SPARK_HOME keeps its zips: they are its PySpark)."""
    import hashlib
    import shlex
    import tempfile

    import pyspark

    lib = os.path.join(os.path.dirname(os.path.abspath(pyspark.__file__)), "python", "lib")
    if not os.path.isdir(lib) or not any(n.endswith(".zip") for n in os.listdir(lib)):
        return sys.executable
    text = _LAUNCHER.format(python=sys.executable, lib=lib,
                            lib_pattern=shlex.quote(lib) + "/*.zip",
                            python_word=shlex.quote(sys.executable))
    directory = os.path.join(tempfile.gettempdir(), f"ringlog-spark-{os.getuid()}")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory,
                        "python-" + hashlib.sha256(text.encode()).hexdigest()[:16])
    if not _only_ours(directory, stat.S_ISDIR):
        return sys.executable  # another user's (or an open) directory: run nothing from it
    if os.path.lexists(path) and not _only_ours(path, stat.S_ISREG):
        os.unlink(path)  # ours to remove: the directory is ours alone
    if not os.path.exists(path):
        temporary = f"{path}.{os.getpid()}"
        with open(temporary, "w") as file:
            file.write(text)
        os.chmod(temporary, 0o755)
        os.replace(temporary, path)
    return path


def _only_ours(path, is_kind):
    """Whether ``path`` (not followed if a link) is of the kind, owned by this user and
    writable by nobody else: a launcher another local user could write is never run."""
    st = os.lstat(path)
    return (is_kind(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _point_workers_at_this_interpreter():
    os.environ["PYSPARK_PYTHON"] = _worker_launcher()
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
