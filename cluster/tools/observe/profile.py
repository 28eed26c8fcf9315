"""``ringlog profile``: sample every process of a cluster for a while, or while a command
runs, and write timelines and a summary.

::

    ringlog profile --data-dir D --out DIR [--duration 60s] [--interval 1s] [-- COMMAND ...]

Without COMMAND it reads every stats page of the cluster of D every ``--interval`` for
``--duration`` (default 60 s); D must hold a cluster. With COMMAND (e.g. ``python -m perf
...``) it starts the command, samples while it runs and stops when it ends (or, when
``--duration`` is given, stops the command after that long: SIGTERM, then SIGKILL 10 s
later); the cluster of D may start after the command does. Then DIR gets
``samples.json``, ``rss.png``, ``gc_latency.png``, ``throughput.png``, ``rings.png`` and
``summary.txt`` (``report``), and the summary is printed. DIR is made if missing and must
hold no files: the tool writes only there and deletes nothing.

Exit status: COMMAND's when there is one; else 0, or 1 when no process published a page
during the run or the tool could not run (its reason on stderr). Ctrl-C or SIGTERM stops
the sampling (and the command it started) and still writes what was sampled.
Owner: the main thread; the sampler runs in a thread of its own.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

from cluster.errors import KafkaError
from cluster.tools.observe import pages, report
from cluster.tools.observe.sampler import Sampler
from cluster.tools.support import ToolError, duration, fail, stop_on_sigterm

DEFAULT_DURATION = 60.0
#: Seconds a command has to exit after SIGTERM before it is killed.
COMMAND_STOP = 10.0


def add_arguments(parser):
    parser.add_argument("--data-dir", required=True, metavar="D",
                        help="the cluster's data directory")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output folder; made if missing, must not hold files")
    parser.add_argument("--duration", type=duration, default=None,
                        help="how long to sample (default 60s; with COMMAND: until it "
                             "ends, or stop it after this long)")
    parser.add_argument("--interval", type=duration, default=1.0,
                        help="time between two reads of the pages (default 1s)")
    parser.add_argument("command", nargs="*", metavar="-- COMMAND",
                        help="a command to run and sample during, after --")


def run(args):
    try:
        return Profile(args).run()
    except (ToolError, OSError, ValueError, KafkaError) as exc:
        return fail(exc, "profile: ")


class Profile:
    """One run of the tool (module doc); ``run()`` returns the exit status."""

    def __init__(self, args):
        self.data_dir = os.path.abspath(args.data_dir)
        self.out = os.path.abspath(args.out)
        self.command = list(args.command)
        if self.command[:1] == ["--"]:
            self.command = self.command[1:]
        self.duration = args.duration
        self.interval = args.interval
        self.status = 0
        self.interrupted = False

    def run(self):
        if not self.command:
            pages.cluster_id(self.data_dir)  # refuse a D without a cluster before anything
        os.makedirs(self.out, exist_ok=True)
        if os.listdir(self.out):
            raise ToolError(f"the output folder {self.out} is not empty; give another --out")
        sampler = Sampler(lambda: pages.snapshots(self.data_dir, required=False),
                          self.interval)
        started = time.time()
        with stop_on_sigterm():
            try:
                with sampler:
                    if self.command:
                        self._run_command()
                    else:
                        time.sleep(self.duration or DEFAULT_DURATION)
            except KeyboardInterrupt:
                self.interrupted = True
        return self._write(sampler.samples, started)

    def _run_command(self):
        print(f"profile: running {' '.join(self.command)}", flush=True)
        try:
            process = subprocess.Popen(self.command)
        except OSError as exc:
            raise ToolError(f"cannot run {self.command[0]!r}: {exc.strerror or exc}") from None
        try:
            self.status = process.wait(timeout=self.duration)
        except subprocess.TimeoutExpired:
            print(f"profile: {self.duration:g} s passed, stopping the command (pid "
                  f"{process.pid})", flush=True)
            self.status = _stop(process)
        except KeyboardInterrupt:
            _stop(process)
            raise

    def _write(self, samples, started):
        run = {"data_dir": self.data_dir, "command": self.command, "start": started,
               "end": time.time(), "interval": self.interval,
               "interrupted": self.interrupted}
        report.write_json(self.out, samples, run)
        report.write_pngs(self.out, samples)
        text = report.summary(samples)
        with open(os.path.join(self.out, report.SUMMARY_TXT), "w", encoding="utf-8") as file:
            file.write(text)
        sys.stdout.write(text)
        print(f"profile: {report.SAMPLES_JSON}, {', '.join(report.PNGS)} and "
              f"{report.SUMMARY_TXT} in {self.out}", flush=True)
        if self.interrupted:
            return 130
        if self.command:
            return self.status
        if not report.timelines(samples):
            print(f"profile: no process of the cluster in {self.data_dir} published a stats "
                  f"page during the run", file=sys.stderr, flush=True)
            return 1
        return 0


def _stop(process):
    """SIGTERM the command this tool started, SIGKILL it after ``COMMAND_STOP`` s; its
    exit status."""
    process.terminate()
    try:
        return process.wait(timeout=COMMAND_STOP)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()
