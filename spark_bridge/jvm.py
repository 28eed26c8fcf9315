"""The Spark JVM behind a PySpark driver: starting it quietly, its processes, its end.

``start_jvm`` starts the JVM as PySpark would, but with its standard error through a pipe
that a thread of the driver copies to the driver's standard error, line by line, leaving
out the one line every start prints because Spark's launcher adds
``--add-modules=jdk.incubator.vector`` (``WARNING: Using incubator modules: ...``: the
JVM's module system prints it before any logging is set up, and no JVM option silences
it). The same pipe keeps a killed bridge's log short: once the driver is gone, nothing
reads the pipe, and the Java errors of a JVM that lost its driver go nowhere instead of
into the log (Java ignores the broken pipe).

PySpark's driver (this Python process) starts the JVM (``java ... PythonGatewayServer``) as
its child, with a pipe on the JVM's standard input; the JVM exits when it reads end of file
there — when the driver closes the pipe, or dies. The JVM in turn starts Spark's Python
workers (``pyspark.daemon`` in its own process group, which forks the task workers; the
Python data source's planner and streaming runners), which exit when the JVM does.

So nothing outlives a driver killed with SIGKILL for long, but its JVM does live on for a few
seconds while its shutdown hooks stop Spark — long enough to still commit a micro-batch. A
bridge restarted at once on the same checkpoint would then run a second query on it
beside the first. The bridge therefore records its JVM in the checkpoint directory
(``record_processes``) and, on start, waits for a recorded JVM that is still alive
(``wait_for_recorded``). A process is identified by pid and start time, so a recycled pid
is not mistaken for it.

Spark's errors (PySpark's ``CapturedException`` and Py4J's) format themselves through the
JVM: ``str()`` of one raises once the JVM is gone. ``error_text`` and ``error_reason`` turn
one into plain text; call them before ``stop_spark``.

Functions for the driver's main thread.
"""
from __future__ import annotations

import os
import re
import subprocess
import threading

import psutil

#: Seconds a recorded JVM of a killed bridge may take to exit before the new bridge gives up.
PREVIOUS_EXIT_TIMEOUT = 60.0
#: Seconds the JVM may take to exit once Spark is stopped and its stdin is closed.
EXIT_TIMEOUT = 30.0


#: The start of the line the JVM's module system prints for Spark's incubator module.
INCUBATOR_NOTICE = b"WARNING: Using incubator modules:"

#: A Python exception's last traceback line, as a worker's traceback in Spark's error ends:
#: ``cluster.errors.NoBrokersAvailable: cluster ... is not running ...``.
_PYTHON_EXCEPTION_LINE = re.compile(r"(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*): (\S.*)")


def start_jvm(settings):
    """Start Spark's JVM for ``settings`` (Spark's keys, ``spark.master`` and
    ``spark.app.name`` included) unless this process has one, its standard error copied to
    ours without the incubator notice. ``SparkSession.builder.getOrCreate()`` then uses it;
    the settings must be the builder's, as the JVM's options are fixed at its start."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
        gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
        threading.Thread(target=_copy_stderr, args=(gateway.proc.stderr,), daemon=True,
                         name="spark-jvm-stderr").start()
        SparkContext._ensure_initialized(gateway=gateway)


def _copy_stderr(pipe):
    """The JVM's standard error to ours (file descriptor 2, which the JVM would otherwise
    have inherited), line by line, but the incubator notice; returns at the end of the pipe
    (the JVM exited). It keeps reading when a write fails, so the JVM never blocks on a
    full pipe."""
    with pipe:
        for line in pipe:
            if not line.startswith(INCUBATOR_NOTICE):
                try:
                    os.write(2, line)
                except OSError:
                    pass  # our stderr is gone: the JVM's lines with it


class PreviousBridgeRunning(RuntimeError):
    """Processes recorded by an earlier bridge on the same checkpoint are still alive."""


def spark_processes():
    """psutil.Process of the running Spark JVM and of every process below it (Spark's Python
    workers, once started)."""
    from pyspark import SparkContext

    process = psutil.Process(SparkContext._gateway.proc.pid)
    return [process] + process.children(recursive=True)


def record_processes(path, processes):
    """Write the ``pid start-time`` of ``processes`` to ``path`` (replaced atomically)."""
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="ascii") as file:
        for process in processes:
            file.write(f"{process.pid} {process.create_time()!r}\n")
    os.replace(temporary, path)


def wait_for_recorded(path, timeout=PREVIOUS_EXIT_TIMEOUT, on_wait=None):
    """Wait until every process recorded in ``path`` (record_processes) has exited; return
    how many were still alive when called. ``on_wait(processes)`` is called first if any
    is. PreviousBridgeRunning naming their pids if some outlive ``timeout`` seconds."""
    try:
        with open(path, encoding="ascii") as file:
            lines = file.read().split("\n")
    except FileNotFoundError:
        return 0
    alive = []
    for line in filter(None, lines):
        pid, started = line.split()
        try:
            process = psutil.Process(int(pid))
            if process.create_time() == float(started):
                alive.append(process)
        except psutil.NoSuchProcess:
            pass
    if alive and on_wait is not None:
        on_wait(alive)
    _, left = psutil.wait_procs(alive, timeout=timeout)
    if left:
        raise PreviousBridgeRunning(
            f"processes {[p.pid for p in left]} of an earlier bridge on this checkpoint "
            f"({path}) still run after {timeout} s; stop them before starting again")
    return len(alive)


def stop_spark(spark, timeout=EXIT_TIMEOUT):
    """Stop ``spark`` (the SparkSession), close its JVM's standard input and wait up to
    ``timeout`` seconds for the JVM to exit — its Python workers exit with it — so that
    nothing this driver started outlives it. Returns the JVM's exit code. A JVM already
    exiting on its own (a signal sent to the whole process group reaches it too, and its
    shutdown hook stops Spark) is only waited for."""
    from py4j.protocol import Py4JError
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    jvm_process = gateway.proc
    try:
        spark.stop()
    except (Py4JError, ConnectionError):
        pass  # the JVM is going: the wait below says whether it went
    gateway.shutdown()
    jvm_process.stdin.close()
    code = jvm_process.wait(timeout)
    SparkContext._gateway = None
    SparkContext._jvm = None
    return code


def exits(timeout):
    """Whether the running Spark JVM exits within ``timeout`` seconds."""
    from pyspark import SparkContext

    try:
        SparkContext._gateway.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def error_text(exc, limit=40):
    """Spark's error message of ``exc`` without its Java stack frames (a Python traceback
    from a worker stays: it says where the source or the transform failed), at most
    ``limit`` lines. Call it while the JVM runs (module doc)."""
    lines = [line for line in str(exc).strip().splitlines()
             if not line.lstrip().startswith(("at ", "... "))
             and line.strip() != "JVM stacktrace:"]
    return "\n".join(lines[:limit])


def error_reason(text):
    """One line of ``error_text``'s ``text`` that says why: the exception a Python worker
    raised (its last traceback line, ``NoBrokersAvailable: ...``), else the first line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        match = _PYTHON_EXCEPTION_LINE.fullmatch(line)
        if match and match.group(1) != "SQLSTATE" and not line.startswith(
                ("org.", "java.", "scala.")):
            return f"{match.group(1)}: {match.group(2)}"
    return lines[0] if lines else "(no message)"
