"""Client processes and the CLI's parser do not load rich, matplotlib or prometheus_client:
only the commands that draw or serve import them."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.bounds import BOUND
from tests.support.paths import ROOT

HEAVY = ("rich", "matplotlib", "prometheus_client")
PROBE = f"""
import sys
import cluster
from cluster import KafkaProducer, KafkaConsumer
import cluster.stats.publisher, cluster.stats.reader
from cluster.tools.cli import build_parser
from cluster.tools.observe import pages, profile, report, rows, sampler, top, metrics
build_parser()
print(sorted(name for name in {HEAVY!r} if name in sys.modules))
"""


@pytest.mark.multiprocess
def test_clients_and_the_parser_load_no_drawing_or_serving_library():
    found = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True,
                           text=True, timeout=BOUND, check=True)
    assert found.stdout.strip() == "[]", found.stderr
