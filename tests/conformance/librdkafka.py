"""``make conformance``: librdkafka's own test suite against a ringlog cluster, through the
Kafka wire gateway.

1. **Fetch** (once, cached): the source package of Debian's librdkafka (the library inside
   Debian's kcat) with ``apt-get source``, through a private sources list under the cache
   folder — the machine's own Debian sources turned into ``deb-src`` entries, with apt's
   lists and archives under the cache too: nothing on the system changes.
2. **Build** (once, cached): ``./configure`` (no SSL, no SASL: ringlog has neither),
   ``make libs`` and ``make -C tests build``: ``tests/test-runner``.
3. **Run**: a 3-broker cluster shaped as the suite's default scenario expects (topics
   auto-created with 4 partitions and replication factor 3), the gateway on free ports,
   ``test.conf`` naming its bootstrap address, then ``test-runner -L`` (the tests that
   need a broker), bounded by ``--timeout``. ``TESTS`` / ``TESTS_SKIP`` in the environment
   narrow the run, as librdkafka's own make does.
4. **Score**: the summary table the runner prints, parsed: passed / failed / skipped, with
   each failure's and skip's reason. Exit 1 if a test of ``--passing`` (a file of test
   names, one a line) did not pass.

    python -m tests.conformance.librdkafka [--cache .cache/conformance] [--timeout 3600]
                                           [--parallel N] [--passing FILE] [--log FILE]
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from cluster.supervisor.cluster import Cluster
from tests.support.gateway import GatewayProcess

PACKAGE = "librdkafka"
SUMMARY_ROW = re.compile(r"^\|\s*(\d{4}\S*)\s*\|\s*(\w+)\s*\|\s*([\d.]+)s\s*\|\s?(.*)$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TEST_END = re.compile(r"=+ Test (\d{4}\S*) (PASSED|FAILED|SKIPPED) =+")


def _deb_src_sources(apt_dir):
    """The machine's Debian sources as deb-src entries, in ``apt_dir/sources/``."""
    parts = os.path.join(apt_dir, "sources")
    os.makedirs(parts, exist_ok=True)
    for path in glob.glob("/etc/apt/sources.list.d/*.sources"):
        with open(path) as file:
            text = re.sub(r"^Types:.*$", "Types: deb-src", file.read(), flags=re.M)
        with open(os.path.join(parts, os.path.basename(path)), "w") as file:
            file.write(text)
    lines = []
    for path in ["/etc/apt/sources.list", *glob.glob("/etc/apt/sources.list.d/*.list")]:
        if os.path.exists(path):
            with open(path) as file:
                lines += [re.sub(r"^deb\s", "deb-src ", line) for line in file
                          if re.match(r"^deb\s", line)]
    with open(os.path.join(parts, "machine.list"), "w") as file:
        file.writelines(lines)
    return parts


def fetch(cache):
    """The unpacked source tree of Debian's librdkafka under ``cache`` (fetched once)."""
    trees = glob.glob(os.path.join(cache, "src", f"{PACKAGE}-*", "tests"))
    if trees:
        return os.path.dirname(trees[0])
    apt_dir = os.path.join(cache, "apt")
    for sub in ("lists/partial", "archives/partial"):
        os.makedirs(os.path.join(apt_dir, sub), exist_ok=True)
    options = ["-o", "Dir::Etc::SourceList=/dev/null",
               "-o", f"Dir::Etc::SourceParts={_deb_src_sources(apt_dir)}",
               "-o", f"Dir::State::Lists={os.path.join(apt_dir, 'lists')}",
               "-o", f"Dir::Cache={apt_dir}",
               "-o", f"Dir::Cache::Archives={os.path.join(apt_dir, 'archives')}"]
    source = os.path.join(cache, "src")
    os.makedirs(source, exist_ok=True)
    subprocess.run(["apt-get", *options, "update"], check=True)
    subprocess.run(["apt-get", *options, "source", "--download-only", PACKAGE], check=True,
                   cwd=source)
    (dsc,) = glob.glob(os.path.join(source, f"{PACKAGE}_*.dsc"))
    subprocess.run(["dpkg-source", "-x", os.path.basename(dsc)], check=True, cwd=source,
                   stdout=subprocess.DEVNULL)
    return os.path.dirname(glob.glob(os.path.join(source, f"{PACKAGE}-*", "tests"))[0])


def build(tree):
    """``tests/test-runner`` of ``tree``, built once."""
    runner = os.path.join(tree, "tests", "test-runner")
    if os.path.exists(runner):
        return runner
    jobs = str(os.cpu_count() or 2)
    subprocess.run(["./configure", "--disable-ssl", "--disable-sasl", "--disable-gssapi"],
                   check=True, cwd=tree, stdout=subprocess.DEVNULL)
    subprocess.run(["make", "-j", jobs, "libs"], check=True, cwd=tree,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["make", "-j", jobs, "-C", "tests", "build"], check=True, cwd=tree,
                   stdout=subprocess.DEVNULL)
    return runner


def parse_summary(output):
    """{test name: (state, reason)} from the runner's summary table; a run stopped before
    its summary (``--timeout``) counts the tests whose end it printed."""
    rows = {}
    text = ANSI.sub("", output)
    for line in text.splitlines():
        match = SUMMARY_ROW.match(line.strip())
        if match:
            name, state, _, reason = match.groups()
            rows[name] = (state, reason.strip())
    if not rows:
        for name, state in TEST_END.findall(text):
            rows[name] = (state, "" if state == "PASSED" else "(run stopped before the "
                                                             "summary: see --log)")
    return rows


def run(runner, timeout, parallel=1):
    """Run ``test-runner -L`` against a fresh cluster and its gateway; (summary, output)."""
    with tempfile.TemporaryDirectory(prefix="ringlog-conformance-") as tmp:
        cluster = Cluster(os.path.join(tmp, "data"), brokers=3, num_partitions=4,
                          default_replication_factor=3, auto_create_topics_enable=True,
                          group_initial_rebalance_delay_ms=0)
        gateway = None
        try:
            cluster.start()
            gateway = GatewayProcess(cluster.data_dir).start()
            work = os.path.join(tmp, "work")
            shutil.copytree(os.path.dirname(runner), work, symlinks=True)
            with open(os.path.join(work, "test.conf"), "w") as file:
                file.write(f"metadata.broker.list={gateway.bootstrap}\n"
                           f"test.timeout.multiplier=2\n")
            started = time.monotonic()
            try:
                tree = os.path.dirname(os.path.dirname(runner))
                libraries = [os.path.join(tree, "src"), os.path.join(tree, "src-cpp")]
                done = subprocess.run(
                    [os.path.join(work, "test-runner"), "-L", f"-p{parallel}"], cwd=work,
                    capture_output=True,
                    text=True, timeout=timeout,
                    env={**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(libraries)})
                output = done.stdout + done.stderr
            except subprocess.TimeoutExpired as exc:
                partial = exc.stdout or b""
                if isinstance(partial, bytes):
                    partial = partial.decode(errors="replace")
                output = partial + f"\n(stopped after {timeout} s)\n"
            print(f"test-runner ran {time.monotonic() - started:.0f} s", flush=True)
            return parse_summary(output), output
        finally:
            if gateway is not None:
                gateway.stop()
            cluster.stop()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.librdkafka")
    parser.add_argument("--cache", default=".cache/conformance")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--passing", help="tests that must pass, one name a line")
    parser.add_argument("--log", help="write the runner's whole output here")
    parser.add_argument("--parallel", type=int, default=1, help="tests run at once (-p)")
    args = parser.parse_args(argv)
    cache = os.path.abspath(args.cache)
    runner = build(fetch(cache))
    summary, output = run(runner, args.timeout, args.parallel)
    if args.log:
        with open(args.log, "w") as file:
            file.write(output)
    by_state = {}
    for name, (state, reason) in sorted(summary.items()):
        by_state.setdefault(state, []).append((name, reason))
    for state in ("FAILED", "RUNNING", "SKIPPED"):
        for name, reason in by_state.get(state, []):
            print(f"{state:8} {name}: {reason}")
    passed = len(by_state.get("PASSED", []))
    failed = len(by_state.get("FAILED", [])) + len(by_state.get("RUNNING", []))
    skipped = len(by_state.get("SKIPPED", []))
    print(f"librdkafka conformance: {passed} passed, {failed} failed, {skipped} skipped")
    if not summary:
        print("the runner printed no summary; its last lines:\n"
              + "\n".join(output.splitlines()[-20:]))
        return 1
    if args.passing:
        with open(args.passing) as file:
            required = [line.strip() for line in file if line.strip()
                        and not line.startswith("#")]
        regressed = [n for n in required if summary.get(n, ("MISSING",))[0] != "PASSED"]
        if regressed:
            print(f"tests that passed before and do not now: {regressed}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
