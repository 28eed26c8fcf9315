"""The README as a test: its shell and Python blocks, run in order as a reader runs them.

The README's code blocks (fenced ```sh / ```python, or indented four spaces, which are
shell) are extracted in order and run in a temporary directory, each after the one before,
so every block works on what the blocks above it left: the cluster the shell block starts
serves the Python example and Spark. The cluster path ``/tmp/rl`` (and the paths built on it)
becomes a path in the temporary directory; ``.venv/bin/python`` and ``.venv/bin/ringlog``
there run this environment's. Shell blocks run with ``bash -e``, Python blocks with this
environment's Python, each bounded in time. A block preceded by ``<!-- not run by
tests/e2e/test_readme.py: <why> -->`` is skipped (``make demo``, ``make bench``, ...).

At the end the cluster is stopped by data directory (``ringlog cluster stop``), whatever
happened; then no process may still use the data directory and none of the cluster's
objects may be left in /dev/shm.
"""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from cluster.metadata.data_dir import read_cluster_id
from shm_ring.naming import list_objects
from tests.support.bounds import BOUND, SPARK_BRIDGE_BOUND
from tests.support.paths import ROOT

README = os.path.join(ROOT, "README.md")
#: The cluster's data directory in the README; every path that starts with it is moved.
README_DATA_DIR = "/tmp/rl"
#: Seconds one block may run (the Spark ones start a JVM: 10-40 s on a loaded machine).
BLOCK_BOUND = SPARK_BRIDGE_BOUND
NOT_RUN = re.compile(r"<!--\s*not run by tests/e2e/test_readme\.py:.+?-->", re.S)
FENCE = re.compile(r"```(\w*)\s*$")
LANGUAGES = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python"}


@dataclasses.dataclass
class Block:
    line: int  # 1-based line of the README where the block starts
    language: str  # "sh" or "python"
    text: str
    run: bool  # False when a not-run comment precedes it


def readme_blocks(markdown):
    """The code blocks of ``markdown``, in order (fenced, or indented by four spaces after a
    blank line); ValueError naming the line for a fenced block of another language that is
    not marked as not run."""
    lines = markdown.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        indented = (lines[i].startswith("    ") and lines[i].strip()
                    and (i == 0 or not lines[i - 1].strip()))
        if not fence and not indented:
            i += 1
            continue
        start = i
        if fence:
            end = i + 1
            while not lines[end].startswith("```"):
                end += 1
            body = lines[start + 1:end]
            i = end + 1
        else:
            end = i
            while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
                end += 1
            body = [line[4:] for line in lines[start:end]]
            i = end
        before = "\n".join(lines[:start]).rstrip()
        run = not before.endswith("-->") or not NOT_RUN.search(before[before.rfind("<!--"):])
        language = LANGUAGES.get(fence.group(1)) if fence else "sh"
        if language is None and run:
            raise ValueError(f"README.md line {start + 1}: a ```{fence.group(1)} block is "
                             f"neither sh nor python; mark it as not run")
        blocks.append(Block(start + 1, language, "\n".join(body).strip() + "\n", run))
    return blocks


def make_venv_bin(tmp_path):
    """``tmp_path/.venv/bin`` with ``python`` and ``ringlog`` of this environment."""
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    installed = os.path.join(os.path.dirname(sys.executable), "ringlog")
    commands = {"python": f'exec {sys.executable} "$@"',
                "ringlog": (f'exec {installed} "$@"' if os.path.exists(installed)
                            else f'exec {sys.executable} -m cluster.tools.cli "$@"')}
    for name, line in commands.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{line}\n")
        path.chmod(0o755)
    return bin_dir


def run_block(block, text, cwd, env):
    """Run one block (bash -e or Python) in a session of its own, bounded by BLOCK_BOUND.
    Returns (exit code or None on timeout, output, processes of the session still running
    BOUND seconds after it ended: these are killed). A detached cluster has a session of
    its own, so it is not among them."""
    argv = ["bash", "-e", "-c", text] if block.language == "sh" else [sys.executable, "-c", text]
    popen = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = popen.communicate(timeout=BLOCK_BOUND)
        code = popen.returncode
    except subprocess.TimeoutExpired:
        os.killpg(popen.pid, signal.SIGKILL)
        output, _ = popen.communicate()
        code = None
    _, left = psutil.wait_procs(session_processes(popen.pid), timeout=BOUND)
    for process in left:
        process.kill()
    return code, output, left


def session_processes(session_id):
    """The running processes of session ``session_id`` (Spark's JVM and Python workers)."""
    found = []
    for pid in psutil.pids():
        try:
            if os.getsid(pid) == session_id:
                found.append(psutil.Process(pid))
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            pass
    return found


def processes_using(path):
    """Processes whose command line names ``path`` (the brokers of its cluster)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(path in arg for arg in process.info["cmdline"] or ()):
            found.append(process)
    return found


def test_readme_blocks_parse():
    blocks = readme_blocks(open(README, encoding="utf-8").read())
    run = [b for b in blocks if b.run]
    assert {b.language for b in run} == {"sh", "python"}
    assert any("make demo" in b.text for b in blocks if not b.run)
    assert not any(re.search(r"^\s*make\b", b.text, re.M) for b in run), \
        "a make command is run by the README test"


@pytest.mark.multiprocess
@pytest.mark.spark
@pytest.mark.slow
def test_readme_blocks_run_in_order(tmp_path):
    data_dir = str(tmp_path / "rl")
    bin_dir = make_venv_bin(tmp_path)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for name in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(name, None)  # what a reader's shell has: the README must say what to set
    blocks = [b for b in readme_blocks(open(README, encoding="utf-8").read()) if b.run]
    try:
        for block in blocks:
            text = block.text.replace(README_DATA_DIR, data_dir)
            code, output, left = run_block(block, text, tmp_path, env)
            assert code == 0, (f"README.md line {block.line} ({block.language}) "
                               f"{'timed out' if code is None else f'exited {code}'}:\n"
                               f"{text}\n--- output ---\n{output[-4000:]}")
            assert not left, (f"README.md line {block.line}: processes left running after "
                              f"it ended: {[p.pid for p in left]}")
    finally:
        cluster_id = read_cluster_id(data_dir) if os.path.isdir(data_dir) else None
        if cluster_id is not None:
            subprocess.run([str(bin_dir / "ringlog"), "cluster", "stop", "--data-dir",
                            data_dir], env=env, capture_output=True, timeout=BOUND * 2)
        _, alive = psutil.wait_procs(processes_using(data_dir), timeout=BOUND)
        for process in alive:
            process.kill()
    assert not alive, f"still running after cluster stop: {[p.pid for p in alive]}"
    assert cluster_id is not None, f"no cluster was started in {data_dir}"
    deadline = time.monotonic() + BOUND
    while list_objects(cluster_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list_objects(cluster_id) == [], f"left in /dev/shm: {list_objects(cluster_id)}"
