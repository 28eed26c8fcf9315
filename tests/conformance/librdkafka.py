"""``make conformance``: librdkafka's own test suite against a ringlog cluster, through the
Kafka wire gateway.

1. **Fetch** (once, cached): the source package of Debian's librdkafka (the library inside
   Debian's kcat) with ``apt-get source``, through a private sources list under the cache
   folder — the machine's own Debian sources turned into ``deb-src`` entries, with apt's
   lists and archives under the cache too: nothing on the system changes.
2. **Build** (once, cached): ``./configure`` (no SSL, no SASL: ringlog has neither),
   ``make libs`` and ``make -C tests build``: ``tests/test-runner``.
3. **Run**: a 3-broker cluster shaped as the suite's default scenario expects (topics
   auto-created with 4 partitions and replication factor 3; otherwise Kafka's defaults,
   as trivup's brokers run: ``group.initial.rebalance.delay.ms`` 3000 lets the two
   members 0089 and 0102 subscribe at once join the first generation together), the
   gateway on free ports, ``test.conf`` naming its bootstrap address, then
   ``test-runner -L`` (the tests that need a broker) once per test number
   (``TESTS=NNNN``; the numbers are read from the runner's table in ``tests/test.c``),
   ``--parallel`` at once. A test that times out
   makes its runner kill itself: one runner per number keeps that from ending the rest.
   The suite runs in its CI mode (``CI=true``, as a CI service sets it: request.timeout.ms
   10000, 0055_producer_latency skipped) wherever it runs, so a local run is CI's run.
   The tests of the suite's ``noautocreate`` scenario run (``-s noautocreate``) against
   a second cluster and gateway, without topic auto-creation. ``--tests`` / ``--skip``
   (or ``TESTS`` / ``TESTS_SKIP``) narrow the run; ``--timeout`` bounds each runner.
4. **Score**: each runner's summary table, parsed: passed / failed / skipped, with each
   failure's reason (its sub-test and first failure line) and each skip's;
   ``EXPECTED_FAILURES`` (tests that fail against Apache Kafka too) are printed apart,
   with why. Exit 1 if a test of ``--passing`` (a file of test names, one a line, ``#``
   comments) that was in the run did not pass; the output ends with those tests, each
   with its reason (CI shows the output's tail). ``--retry``: such a test is run again,
   once, alone (Kafka's CI retries its flaky tests so); it counts as passed only if that
   passes, and is printed as "flaky: passed on retry" with the run's failure.

    python -m tests.conformance.librdkafka [--cache .cache/conformance] [--timeout 600]
                                           [--parallel N] [--tests 0081,0092] [--skip ...]
                                           [--passing FILE] [--retry] [--log FILE]
                                           [--keep DIR]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
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
TIMED_OUT = re.compile(r"Test (\d{4}\w*)(?: \(([^\n]*?)\))? timed out "
                       r"(\(timeout set to \d+ seconds\))")
FAILURE = re.compile(r'### Test "(\d{4}\w*)(?: \(([^"\n]*)\))?" failed at ([^\n]*?) at \w{3} '
                     r'[^\n]*###\n([^\n]*)')
#: A sub-test's start line ("[ name ]"; its end says ": PASS (..)" or ": SKIP..." inside).
SUB_TEST = re.compile(r"^\[(\d{4}\w*)\s*/\s*[\d.]+s\] \[ ([^\n]*) \]$", re.M)
SUB_TEST_END = re.compile(r": (?:PASS \([\d.]+s\)|SKIP\b)")
#: A librdkafka log line of a warning or worse: its level, facility, test (the client id is
#: the test's name) and text.
CLIENT_LOG = re.compile(r"^%([0-4])\|[\d.]+\|(\w+)\|(\d{4}\w*)#[^|\n]*\| "
                        r"(?:\[thrd:[^\]\n]*\]: )?([^\n]*)$", re.M)
TEST_ENTRY = re.compile(r"_TEST\((\d{4}_\w+),\s*([^,)]*)")
SCENARIO = re.compile(r'\.scenario\s*=\s*"(\w+)"')
#: The scenarios run, each on a cluster of its own: the suite's default (topics
#: auto-created with 4 partitions, RF 3) and ``noautocreate`` (no auto-creation).
SCENARIOS = {"default": True, "noautocreate": False}
#: The suite's CI mode, on in every run: with ``CI`` set (as CI services set it) its
#: clients take request.timeout.ms 10000 instead of librdkafka's 30000 and
#: 0055_producer_latency skips itself, so a run here and a run in CI are the same run.
CI_MODE = "true"
# test.conf's test.timeout.multiplier: the suite's timeouts are set for a broker on its own
# machine; here three brokers, the gateway and the tests share two cores.
TIMEOUT_MULTIPLIER = 2
#: Tests that fail against Apache Kafka too, with the reason: printed apart from the other
#: failures (they are counted as failed all the same).
EXPECTED_FAILURES = {
    "0092_mixed_msgver":
        "its AlterConfigs helper (test_AlterConfigs_simple) sends every described config "
        "and then message.format.version again: the key twice in one resource, which "
        "Kafka refuses with INVALID_REQUEST \"Error due to duplicate config keys\" "
        "(ConfigAdminManager.preprocess)",
    "0107_topic_recreate":
        "librdkafka 2.0.2's consumer destroy hangs on a reference held by a partition "
        "lost with its deleted topic (fixed in librdkafka 2.1.0: \"a reference count "
        "issue was blocking the consumer from closing\"); the records produced after "
        "the re-creation are consumed",
    "0113_cooperative_rebalance":
        "h_delete_topic: librdkafka 2.0.2's consumer destroy hangs on a reference held by "
        "the partition lost with its deleted topic (fixed in librdkafka 2.1.0); close() "
        "itself completes",
}


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


def list_tests(tree):
    """{test number: [test names]} of the runner's table (``tests[]`` in ``tests/test.c``),
    in order, without the manual ones (run only when named)."""
    with open(os.path.join(tree, "tests", "test.c")) as file:
        text = file.read()
    numbers = {}
    for name, flags in TEST_ENTRY.findall(text):
        if "TEST_F_MANUAL" not in flags:
            numbers.setdefault(name[:4], []).append(name)
    return numbers


def scenarios(tree):
    """{test name: scenario} of the tests whose scenario is not ``default`` (the
    ``.scenario`` of their entry in ``tests[]``)."""
    with open(os.path.join(tree, "tests", "test.c")) as file:
        text = file.read()
    starts = [m.start() for m in TEST_ENTRY.finditer(text)] + [len(text)]
    out = {}
    for match, end in zip(TEST_ENTRY.finditer(text), starts[1:]):
        found = SCENARIO.search(text, match.start(), end)
        if found and found.group(1) != "default":
            out[match.group(1)] = found.group(1)
    return out


def parse_summary(output):
    """{test name: (state, reason)} from the runner's summary table. A failure's reason is
    the table's (the test's first failure, its sub-test first), else the first failure
    printed, with its sub-test; a test the runner killed at its timeout (it then kills
    itself: a summary is printed first, the reason after) gets the timeout line with the
    sub-test it was in; a run with no summary counts the tests whose end it printed."""
    rows = {}
    text = ANSI.sub("", output)
    for line in text.splitlines():
        match = SUMMARY_ROW.match(line.strip())
        if match:
            name, state, _, reason = match.groups()
            rows[name] = (state, reason.strip())
    for name, sub_test, detail in TIMED_OUT.findall(text):
        rows[name] = ("FAILED", f"timed out{_in_sub_test(sub_test)} {detail}")
    first_failures = first_failure_lines(text)
    for name, (state, reason) in list(rows.items()):
        if state == "FAILED" and not reason and name in first_failures:
            rows[name] = (state, first_failures[name])
    if not rows:
        for name, state in TEST_END.findall(text):
            rows[name] = (state, "" if state == "PASSED" else "(run stopped before the "
                                                             "summary: see --log)")
    return rows


def _in_sub_test(sub_test):
    return f" in sub-test {sub_test}" if sub_test else ""


def first_failure_lines(text):
    """{test name: its first failure: sub-test, where, the message's first line}."""
    out = {}
    for name, sub_test, where, message in FAILURE.findall(text):
        sub = f"[{sub_test}] " if sub_test else ""
        out.setdefault(name, f"{sub}{where}: {message.strip()}")
    return out


def last_sub_test(text, name):
    """The sub-test of ``name`` that started last and did not end (None if none)."""
    last = None
    for test, sub_test in SUB_TEST.findall(text):
        if test == name:
            last = None if SUB_TEST_END.search(sub_test) else sub_test
    return last


def _unfinished_reason(output, name, stopped):
    """Why a test whose end the runner never printed failed: the runner's end, the
    sub-test it was in, the first failure printed if any."""
    text = ANSI.sub("", output)
    why = stopped or "runner ended before the test's end"
    reason = f"({why}{_in_sub_test(last_sub_test(text, name))}; see --log)"
    first = first_failure_lines(text).get(name)
    return f"{reason} first failure: {first}" if first else reason


def run_one(work, scenario, number, names, bound):
    """``test-runner -L -s scenario`` with ``TESTS=number`` in ``work`` (a copy of the
    runner's directory with its ``test.conf``): ({name: (state, reason)}, output). Each
    test number is its own runner process, so a test that times out (the runner kills
    itself then) or hangs past ``bound`` seconds fails alone."""
    env = {**os.environ, "TESTS": number, "CI": CI_MODE, "LD_LIBRARY_PATH": os.pathsep.join(
        os.path.join(work, "..", "lib", sub) for sub in ("src", "src-cpp"))}
    try:
        # stdbuf -oL: the summary table goes to stdout, and a runner that aborts (a test
        # that failed leaves librdkafka threads behind) or kills itself (a timeout) would
        # lose what a pipe's buffer held.
        done = subprocess.run(
            ["stdbuf", "-oL", os.path.join(work, "test-runner"), "-L", "-s", scenario],
            cwd=work, capture_output=True, text=True, errors="replace", timeout=bound,
            env=env)
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        output = "".join(part.decode(errors="replace") if isinstance(part, bytes)
                         else part or "" for part in (exc.stdout, exc.stderr))
        stopped = f"runner stopped after {bound:.0f} s"
        output += f"\n({stopped})\n"
    else:
        stopped = None
    rows = parse_summary(output)
    for name in names:
        if name not in rows and re.search(rf"\[{name}\s+/", output):
            rows[name] = ("FAILED", _unfinished_reason(output, name, stopped))
    return rows, output


def select(numbers, only=None, skip=None):
    """``numbers`` ({number: names}) narrowed: ``only`` / ``skip`` hold test numbers or
    names (a name picks its whole number: the runner's TESTS matches numbers)."""
    if only:
        numbers = {n: names for n, names in numbers.items() if any(w[:4] == n for w in only)}
    if skip:
        numbers = {n: names for n, names in numbers.items()
                   if not any(w == n or w in names for w in skip)}
    return numbers


def _merge(summary, rows):
    """A test runs in every scenario's runner and is skipped in all but its own: a
    skip never replaces another state."""
    for name, row in rows.items():
        if row[0] != "SKIPPED" or summary.get(name, row)[0] == "SKIPPED":
            summary[name] = row


def _work_dir(keep):
    """The run's folder: ``keep`` (created; left in place with the brokers' and the
    gateway's logs) or a temporary one, removed at the end."""
    if keep:
        os.makedirs(keep)  # a folder of an earlier run is not reused: the clusters start empty
        return contextlib.nullcontext(os.path.abspath(keep))
    return tempfile.TemporaryDirectory(prefix="ringlog-conformance-")


def run(runner, numbers, timeout, parallel=1, by_scenario=None, keep=None):
    """The tests of ``numbers`` ({number: names}), each scenario's (``by_scenario``: {test
    name: scenario} of those not in the default one) against a fresh cluster of its own
    with its gateway, ``parallel`` runner processes at once; (summary, output). ``keep``:
    the folder to run in and leave (see ``_work_dir``)."""
    by_scenario = by_scenario or {}
    jobs = [("default", number, names) for number, names in numbers.items()]
    for scenario in SCENARIOS:
        jobs += [(scenario, number, names) for number, names in numbers.items()
                 if scenario != "default" and any(by_scenario.get(n) == scenario
                                                  for n in names)]
    tree = os.path.dirname(os.path.dirname(runner))
    with _work_dir(keep) as tmp:
        os.makedirs(os.path.join(tmp, "lib"))
        for sub in ("src", "src-cpp"):
            os.symlink(os.path.join(tree, sub), os.path.join(tmp, "lib", sub))
        served = []
        try:
            works = {}
            for scenario in sorted({job[0] for job in jobs}):
                cluster = Cluster(os.path.join(tmp, f"data-{scenario}"), brokers=3,
                                  num_partitions=4, default_replication_factor=3,
                                  auto_create_topics_enable=SCENARIOS[scenario])
                served.append((cluster, None))
                cluster.start()
                gateway = GatewayProcess(cluster.data_dir).start()
                served[-1] = (cluster, gateway)
                work = works[scenario] = os.path.join(tmp, f"work-{scenario}")
                shutil.copytree(os.path.dirname(runner), work, symlinks=True)
                with open(os.path.join(work, "test.conf"), "w") as file:
                    file.write(f"metadata.broker.list={gateway.bootstrap}\n"
                               f"test.timeout.multiplier={TIMEOUT_MULTIPLIER}\n")
            started = time.monotonic()
            summary, outputs = {}, []
            with concurrent.futures.ThreadPoolExecutor(max(1, parallel)) as pool:
                futures = [pool.submit(run_one, works[scenario], scenario, number, names,
                                       timeout) for scenario, number, names in jobs]
                for future in concurrent.futures.as_completed(futures):
                    rows, output = future.result()
                    _merge(summary, rows)
                    outputs.append(output)
                    for name, (state, _) in sorted(rows.items()):
                        if state != "SKIPPED" or name not in by_scenario:
                            print(f"{state:8} {name}", flush=True)
            print(f"test-runner ran {time.monotonic() - started:.0f} s "
                  f"({len(jobs)} runners, {parallel} at once)", flush=True)
            return summary, "\n".join(outputs)
        finally:
            for cluster, gateway in served:
                if gateway is not None:
                    gateway.stop()
                cluster.stop()


def score(summary):
    """The score's lines: each skip, then each expected failure (``EXPECTED_FAILURES``)
    with why, then each other failure, with its reason, then the counts."""
    by_state = {}
    for name, (state, reason) in sorted(summary.items()):
        by_state.setdefault(state, []).append((name, reason))
    skips = [f"SKIPPED  {name}: {reason}" for name, reason in by_state.get("SKIPPED", [])]
    expected, failures = [], []
    for state in ("FAILED", "RUNNING"):
        for name, reason in by_state.get(state, []):
            if name in EXPECTED_FAILURES:
                expected.append(f"EXPECTED {name}: {reason} (fails against Kafka too: "
                                f"{EXPECTED_FAILURES[name]})")
            else:
                failures.append(f"{state:8} {name}: {reason}")
    passed = len(by_state.get("PASSED", []))
    failed = len(expected) + len(failures)
    names = ", ".join(line.split()[1].rstrip(":") for line in expected) or "none"
    return [*skips, *expected, *failures,
            f"librdkafka conformance: {passed} passed, {failed} failed ({len(expected)} of "
            f"them expected: {names}), {len(skips)} skipped"]


#: Characters of a failure's reason printed in the closing lines.
REASON_CHARS = 400


def regressions(summary, required, numbers):
    """The tests of ``required`` (the passing list) that were in the run (``numbers``)
    and did not pass: [(name, state, reason)], in the list's order."""
    out = []
    for name in required:
        if name[:4] in numbers:
            state, reason = summary.get(name, ("MISSING", "no result: see --log"))
            if state != "PASSED":
                out.append((name, state, reason))
    return out


def _short(reason):
    reason = reason or "(no reason printed: see --log)"
    return reason[:REASON_CHARS] + " ..." if len(reason) > REASON_CHARS else reason


#: librdkafka warnings printed per failed test in the closing lines, and their length.
CLIENT_LINES = 3
CLIENT_CHARS = 200


def client_warnings(output):
    """{test name: the last ``CLIENT_LINES`` warnings and errors its clients logged
    (librdkafka's log lines of level 4 or lower), as "FACILITY: text"}."""
    said = {}
    for _, facility, name, text in CLIENT_LOG.findall(ANSI.sub("", output)):
        lines = said.setdefault(name, [])
        lines.append(f"{facility}: {text.strip()}"[:CLIENT_CHARS])
        del lines[:-CLIENT_LINES]
    return said


def closing_lines(regressed, source, flaky=(), said=None):
    """The run's last lines (CI shows the tail of the output): each test of the passing
    list (``source``) that failed and passed when run again alone (``flaky``: (name,
    state, first run's reason)), then every one that did not pass, each with its state
    and reason, and under it the last warnings its clients logged in the run (``said``:
    ``client_warnings``)."""
    said = said or {}
    lines = []
    if flaky:
        lines.append(f"FLAKY: {len(flaky)} test(s) of {source} failed in the run and "
                     f"passed on retry (run again alone): "
                     f"{', '.join(name for name, _, _ in flaky)}")
        for name, state, reason in flaky:
            lines.append(f"  flaky: passed on retry: {name}; the run's failure: {state} "
                         f"{_short(reason)}")
            lines += [f"    client: {line}" for line in said.get(name, [])]
    if regressed:
        lines.append(f"tests of {source} that passed before and do not now "
                     f"({len(regressed)}): {', '.join(name for name, _, _ in regressed)}")
        for name, state, reason in regressed:
            lines.append(f"  {state} {name}: {_short(reason)}")
            lines += [f"    client: {line}" for line in said.get(name, [])]
    return lines


def retry_alone(regressed, rerun):
    """Each test of ``regressed`` (name, state, reason) run again, once, alone (``rerun``:
    {number: names} -> summary of a run of those numbers one at a time): (flaky, still
    failing), a test counting as flaky only if its retry passed; the still failing keep
    their first run's reason and the retry's after it."""
    summary = rerun({name[:4] for name, _, _ in regressed})
    flaky, failing = [], []
    for name, state, reason in regressed:
        again = summary.get(name, ("MISSING", "no result: see --log"))
        if again[0] == "PASSED":
            flaky.append((name, state, reason))
        else:
            failing.append((name, state, f"{reason} | run again alone: {again[0]} "
                                         f"{again[1]}"))
    return flaky, failing


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.librdkafka")
    parser.add_argument("--cache", default=".cache/conformance")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds one test number's runner may take (its own "
                             "timeouts usually end it first)")
    parser.add_argument("--passing", help="tests that must pass, one name a line")
    parser.add_argument("--log", help="write the runner's whole output here")
    parser.add_argument("--retry", action="store_true",
                        help="run a test of --passing that failed again, once, alone: it "
                             "counts as passed (printed as flaky, with the run's failure) "
                             "only if that passes")
    parser.add_argument("--keep", metavar="DIR",
                        help="run the clusters in DIR (a new folder) and leave it: the "
                             "brokers' logs (DIR/data-*/broker-*/broker.log), the gateway's, "
                             "the runner's work folders")
    parser.add_argument("--parallel", type=int, default=1,
                        help="runner processes (one test number each) at once")
    parser.add_argument("--tests", default=os.environ.get("TESTS", ""),
                        help="only these test numbers or names (comma or space separated; "
                             "default $TESTS)")
    parser.add_argument("--skip", default=os.environ.get("TESTS_SKIP", ""),
                        help="not these test numbers or names (default $TESTS_SKIP)")
    args = parser.parse_args(argv)
    cache = os.path.abspath(args.cache)
    try:
        tree = fetch(cache)
        runner = build(tree)
    except (subprocess.CalledProcessError, FileNotFoundError, ValueError, IndexError) as exc:
        # a machine without Debian's deb-src mirror or a C toolchain cannot get the suite:
        # said loudly, not counted as a regression of ringlog (as the kcat tests skip
        # without kcat)
        print(f"librdkafka conformance NOT RUN: librdkafka's test suite could not be "
              f"fetched or built on this machine ({exc}); it needs apt-get source access to "
              f"Debian's mirror and a C toolchain (build-essential)", file=sys.stderr)
        return 0
    numbers = select(list_tests(tree), re.findall(r"[^\s,]+", args.tests),
                     re.findall(r"[^\s,]+", args.skip))
    started = time.monotonic()
    summary, output = run(runner, numbers, args.timeout, args.parallel, scenarios(tree),
                          args.keep)
    print(f"run with the cluster's start and stop: {time.monotonic() - started:.0f} s")
    if args.log:
        with open(args.log, "w") as file:
            file.write(output)
    for line in score(summary):
        print(line)
    if not summary:
        print("the runner printed no summary; its last lines:\n"
              + "\n".join(output.splitlines()[-20:]))
        return 1
    if args.passing:
        with open(args.passing) as file:
            required = [line.strip() for line in file if line.strip()
                        and not line.startswith("#")]
        regressed, flaky = regressions(summary, required, numbers), []
        if regressed and args.retry:
            def rerun(again):
                print(f"running again, alone: {', '.join(sorted(again))}", flush=True)
                retried, retried_output = run(
                    runner, {n: numbers[n] for n in sorted(again)}, args.timeout, 1,
                    scenarios(tree), args.keep and os.path.join(args.keep, "retry"))
                if args.log:
                    with open(args.log, "a") as file:
                        file.write("\n=== run again, alone ===\n" + retried_output)
                return retried

            flaky, regressed = retry_alone(regressed, rerun)
        for line in closing_lines(regressed, args.passing, flaky, client_warnings(output)):
            print(line)
        if regressed:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
