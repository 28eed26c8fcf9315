"""``segments.durability``: with fsync off (``ringlog.fsync=false``, the dev profile) a
partition log's appends, rolls, flushes, checkpoints and close make no fsync or fdatasync
call at all, and its records read back the same; with it on (the default) they do."""
from __future__ import annotations

import os

import pytest

from segments import durability
from tests.segments.helpers import all_records, open_log, simple_batch


@pytest.fixture
def syncs(monkeypatch):
    calls = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def counted(fd, real=real, name=name):
            calls.append(name)
            real(fd)
        monkeypatch.setattr(os, name, counted)
    yield calls
    durability.set_enabled(True)


def exercise(path):
    """Appends over several segments, a flush, a clean close, a reopen: every path that
    fsyncs (segments, indexes, checkpoints, the producer snapshot, directories)."""
    batch = simple_batch(10)
    log = open_log(path, **{"segment.bytes": 2 * len(batch), "flush.messages": 5})
    for _ in range(5):
        log.append(batch)
    log.flush()
    log.close()
    log = open_log(path)
    records = all_records(log)
    log.close()
    return records


@pytest.mark.parametrize("enabled", [True, False])
def test_fsync_switch(tmp_path, syncs, enabled):
    durability.set_enabled(enabled)
    records = exercise(tmp_path / "t-0")
    assert len(records) == 50
    assert (syncs != []) is enabled, syncs
