"""Fixtures of the observability tools' tests (snapshots made by hand:
tests/support/snapshots.py): ``cluster_dir`` is a data directory holding a cluster id and
no process, so the commands run on pages the test hands them (``fake_pages``: what
``pages.read_pages`` returns)."""
from __future__ import annotations

import pytest

from cluster.metadata import data_dir as dd
from cluster.tools.observe import pages


@pytest.fixture
def cluster_dir(tmp_path):
    path = tmp_path / "data"
    dd.ensure_cluster_id(path)
    return path


@pytest.fixture
def fake_pages(monkeypatch):
    """``fake_pages.reads``: the lists of snapshots successive reads return (the last one
    again once they run out); ``fake_pages.count``: reads so far."""
    class Fake:
        reads = [[]]
        count = 0

        def __call__(self, cluster):
            found = self.reads[min(self.count, len(self.reads) - 1)]
            self.count += 1
            return list(found)
    fake = Fake()
    monkeypatch.setattr(pages, "read_pages", fake)
    return fake
