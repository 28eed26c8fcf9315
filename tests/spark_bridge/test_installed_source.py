"""The installed ``ringlog`` source is found as Spark users expect: without ``get_spark`` and
without ``spark.dataSource.register``, PySpark 4 registers it from the top-level module
``pyspark_ringlog`` (setup.cfg installs it).

Both tests run a fresh Python process of this environment (``sys.executable``) in a
temporary directory with no PYTHONPATH, so only what the install puts on ``sys.path``
counts — not the checkout as current directory, and not this test process's session.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tests.spark_bridge.helpers import create_topic, module_cluster, produce
from tests.support.bounds import BOUND, SPARK_BRIDGE_BOUND

pytestmark = pytest.mark.multiprocess

cluster = module_cluster("installed-source", brokers=1)

#: PySpark's own lookup (what its Python worker runs on Spark's first data-source lookup),
#: printing the names it found as JSON.
LOOKUP = textwrap.dedent("""
    import io, json
    from pyspark.serializers import read_int
    from pyspark.sql.worker.lookup_data_sources import _main
    out = io.BytesIO()
    _main(None, out)
    out.seek(0)
    names = []
    for _ in range(read_int(out)):
        names.append(out.read(read_int(out)).decode())  # write_with_length(name)
        out.read(read_int(out))  # the pickled class
    print(json.dumps(names))
""")

#: A user's first Spark job: the builder, no ringlog import, format("ringlog").
PLAIN_SESSION = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .getOrCreate())
    try:
        df = (spark.read.format("ringlog").option("bootstrap.servers", sys.argv[1])
              .option("subscribe", "installed").option("startingOffsets", "earliest").load())
        print("count", df.count())
    finally:
        spark.stop()
""")


def fresh_env():
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env.pop("PYTHONPATH", None)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    return env


def test_pyspark_lookup_finds_the_installed_source(tmp_path):
    done = subprocess.run([sys.executable, "-c", LOOKUP], cwd=tmp_path, env=fresh_env(),
                          capture_output=True, text=True, timeout=BOUND)
    assert done.returncode == 0, done.stderr
    assert "ringlog" in json.loads(done.stdout.splitlines()[-1])


@pytest.mark.spark
@pytest.mark.slow
def test_a_plain_session_reads_format_ringlog(cluster, tmp_path):
    create_topic(cluster, "installed", 2)
    produced = produce(cluster, "installed", 50)
    out_path, err_path = tmp_path / "driver.out", tmp_path / "driver.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        popen = subprocess.Popen([sys.executable, "-c", PLAIN_SESSION,
                                  cluster.bootstrap_servers],
                                 cwd=tmp_path, env=fresh_env(), stdout=out, stderr=err)
    driver = psutil.Process(popen.pid)
    seen = {}  # every process below the driver (the JVM, Spark's Python workers)
    try:
        deadline = time.monotonic() + SPARK_BRIDGE_BOUND
        while popen.poll() is None:
            assert time.monotonic() < deadline, f"no end within {SPARK_BRIDGE_BOUND} s"
            try:
                seen.update((p.pid, p) for p in driver.children(recursive=True))
            except psutil.NoSuchProcess:
                pass
            time.sleep(0.2)
        assert popen.returncode == 0, err_path.read_text()[-3000:]
        assert f"count {len(produced)}" in out_path.read_text().splitlines()
    finally:
        popen.kill()
        popen.wait(BOUND)
        _, alive = psutil.wait_procs(list(seen.values()), timeout=BOUND)
        for process in alive:
            process.kill()
    assert not alive, f"left running: {[p.pid for p in alive]}"
