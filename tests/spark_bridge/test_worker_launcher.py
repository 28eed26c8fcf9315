"""What Spark's Python workers run (``spark_bridge.session._worker_launcher``): this
interpreter, importing the installed PySpark (with its bytecode) although Spark puts
PySpark's own zips first on the workers' PYTHONPATH; every other path entry kept, in order.
From the zip each worker compiled PySpark anew, and on a loaded machine a streaming source's
worker missed Spark's 10-second connect-back deadline (the logs demo's job died at start)."""
from __future__ import annotations

import os
import subprocess
import sys

import pyspark
import pytest

from spark_bridge.session import _worker_launcher
from tests.support.bounds import BOUND

pytestmark = [pytest.mark.multiprocess]

LIB = os.path.join(os.path.dirname(os.path.abspath(pyspark.__file__)), "python", "lib")
SHOW = ("import os, sys, pyspark, py4j; "
        "print(pyspark.__file__); print(py4j.__file__); print(sys.executable); "
        "print(os.environ['PYTHONPATH'])")


def test_workers_import_the_installed_pyspark_not_its_zip(tmp_path):
    zips = sorted(os.path.join(LIB, n) for n in os.listdir(LIB) if n.endswith(".zip"))
    assert zips, "this PySpark has no zips: nothing to check"
    mine = [str(tmp_path / "a"), str(tmp_path / "b c")]
    launcher = _worker_launcher()
    assert launcher != sys.executable and os.access(launcher, os.X_OK)
    assert _worker_launcher() == launcher  # written once, then found
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(zips[:1] + mine[:1] + zips[1:]
                                                      + mine[1:]))
    shown = subprocess.run([launcher, "-c", SHOW], env=env, capture_output=True, text=True,
                           timeout=BOUND, check=True).stdout.splitlines()
    pyspark_file, py4j_file, executable, path = shown
    assert ".zip" not in pyspark_file and ".zip" not in py4j_file
    assert os.path.dirname(pyspark_file) == os.path.dirname(os.path.abspath(pyspark.__file__))
    assert os.path.realpath(executable) == os.path.realpath(sys.executable)
    assert path == os.pathsep.join(mine)


def _launcher_dir(tmp_path, monkeypatch, mode):
    import tempfile
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    directory = tmp_path / f"ringlog-spark-{os.getuid()}"
    directory.mkdir()
    directory.chmod(mode)
    return directory


def test_a_launcher_directory_others_can_write_is_not_used(tmp_path, monkeypatch):
    """Another local user who made (or can write) the directory could swap the launcher:
    the workers then run this interpreter directly, and nothing is written there."""
    directory = _launcher_dir(tmp_path, monkeypatch, 0o777)
    assert _worker_launcher() == sys.executable
    assert os.listdir(directory) == []


def test_a_launcher_others_can_write_is_replaced_before_it_runs(tmp_path, monkeypatch):
    directory = _launcher_dir(tmp_path, monkeypatch, 0o700)
    first = _worker_launcher()
    assert os.path.dirname(first) == str(directory)
    with open(first, "w") as file:
        file.write("#!/bin/sh\necho planted\n")
    os.chmod(first, 0o777)
    assert _worker_launcher() == first
    assert "planted" not in open(first).read()
    assert not os.stat(first).st_mode & 0o022
