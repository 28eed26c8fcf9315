"""What a process that only sends records loads: the producer leaves numpy, the codec
libraries and Hypothesis (through kio) unloaded until something needs them
(``perf/client_rss.py`` measures what that saves)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.bounds import IN_PROCESS_BOUND
from tests.support.paths import ROOT

HEAVY = ("numpy", "hypothesis", "cramjam", "lz4", "zstandard")

pytestmark = pytest.mark.multiprocess  # each test starts a fresh interpreter


def loaded_after(script):
    """The HEAVY modules loaded after ``script`` ran in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", script + f"\nimport sys\nprint(sorted(set({HEAVY!r}) & "
                                        f"set(sys.modules)))"],
        cwd=ROOT, timeout=IN_PROCESS_BOUND, check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def test_sending_records_loads_none_of_the_heavy_libraries(fake_cluster):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    script = (f"from cluster import KafkaProducer\n"
              f"with KafkaProducer(bootstrap_servers={cluster.data_dir!r}, linger_ms=0) as p:\n"
              f"    p.send('logs', b'v').get({IN_PROCESS_BOUND})\n")
    assert loaded_after(script) == "[]"
    assert [r.value for r in cluster.records("logs", 0)] == [b"v"]


def test_the_bulk_send_and_a_codec_load_theirs_when_used(fake_cluster):
    cluster = fake_cluster(brokers=1)
    cluster.create_topic("logs")
    script = (f"from cluster import KafkaProducer\n"
              f"with KafkaProducer(bootstrap_servers={cluster.data_dir!r},\n"
              f"                   compression_type='lz4') as p:\n"
              f"    p.send_batch('logs', [b'a', b'b'])[0].get({IN_PROCESS_BOUND})\n")
    assert loaded_after(script) == "['lz4', 'numpy']"
    assert [r.value for r in cluster.records("logs", 0)] == [b"a", b"b"]


def test_hypothesis_stays_importable_after_the_protocol():
    script = ("import cluster.protocol.frames\nimport hypothesis.strategies as st\n"
              "assert st.integers().example() is not None\n")
    assert loaded_after(script) == "['hypothesis']"
