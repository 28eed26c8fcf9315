"""The machine the suite ran on: a description, and its limits measured in the same run.

* ``memcpy_gb_s``: numpy ``copyto`` of a ``MiB``-sized buffer, the best of ``REPEATS``
  (bytes copied / s, 1e9);
* ``write_mb_s``: sequential ``write`` of 1 MiB blocks to a new file in the suite's work
  directory (where the logs go), timed up to and including one ``fsync`` at the end
  (bytes / s, 1e6), the file removed after;
* ``codec_path``: which record paths run, compiled (Cython) or pure Python (issue 24).

``describe`` also notes the load average: the machine is shared, and the load before and
after the run says how much of it the suite had.

Functions only; any thread.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
import time

import numpy as np
import psutil

REPEATS = 5
_MIB = 1 << 20
_PACKAGES = ("numpy", "redis", "pyzmq", "psutil", "matplotlib", "rich")


def describe(redis_server=None):
    """Host, CPU, memory, OS, Python and library versions, filesystem, load."""
    info = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "memory_bytes": psutil.virtual_memory().total,
        "python": sys.version.split()[0],
        "packages": {name: _version(name) for name in _PACKAGES},
        "redis_server": _redis_version(redis_server),
        "git_commit": _git_commit(),
        "load_average": list(os.getloadavg()),
    }
    return info


def codec_path():
    """Which record paths run: compiled (Cython, and which modules) or pure Python, and why
    (``segments.record.accel``); the suite's client processes inherit the same switch and
    build."""
    import cluster.producer.kafka_producer  # noqa: F401  (each asks accel for its twin)
    import consumer_proc.record_columns  # noqa: F401
    from segments.record import accel
    return accel.describe()


def memcpy_gb_s(mib, repeats=REPEATS):
    """Best copy rate of ``mib`` MiB between two numpy buffers, in GB/s."""
    src = np.ones(mib * _MIB, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return src.nbytes / best / 1e9


def write_mb_s(directory, mib):
    """Sequential write of ``mib`` MiB in 1 MiB blocks then fsync, in MB/s."""
    block = os.urandom(_MIB)
    path = os.path.join(directory, "machine-write-test")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        start = time.perf_counter()
        for _ in range(mib):
            os.write(fd, block)
        os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return mib * _MIB / elapsed / 1e6


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _redis_version(path):
    path = path or shutil.which("redis-server")
    if not path or not os.access(path, os.X_OK):
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _git_commit():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        out = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None
