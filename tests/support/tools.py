"""Running the ``ringlog`` tools in tests: one real cluster per test module, and a call of a
tool's ``run()`` with parsed arguments and a given standard input.

``tool_cluster(brokers)`` makes a module-scoped fixture: the cluster starts once for the
module (broker start-up is the slow part) and is stopped in ``finally``; afterwards none
of its shared-memory objects may remain. ``run_tool(module, *argv, stdin=b"")`` parses
``argv`` as the CLI would (``module.add_arguments``) and returns ``module.run(args)``;
capture stdout and stderr with pytest's ``capsys``.
"""
from __future__ import annotations

import argparse
import io
import sys

import pytest

from cluster.supervisor.cluster import Cluster
from shm_ring.naming import list_objects


def tool_cluster(brokers, **config):
    """A module-scoped fixture yielding a started Cluster of ``brokers`` brokers."""
    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory):
        running = Cluster(tmp_path_factory.mktemp("tools") / "data", brokers=brokers, **config)
        try:
            running.start()
            yield running
        finally:
            running.stop()
        assert list_objects(running.cluster_id) == []
    return cluster


def run_tool(module, *argv, stdin=b""):
    """``module.run`` on ``argv`` parsed by ``module.add_arguments``, reading ``stdin``."""
    parser = argparse.ArgumentParser(prog=module.__name__)
    module.add_arguments(parser)
    args = parser.parse_args([str(a) for a in argv])
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    try:
        return module.run(args)
    finally:
        sys.stdin = saved
