"""``ringlog top``: every process of a cluster and its clients, live, one row each.

::

    ringlog top --data-dir D [--sort COLUMN] [--interval SECONDS] [--once [--json]]

Reads the stats pages (``pages``) every ``--interval`` seconds and shows a table (rich's
``Live``): role, name, pid, state (alive, stale, dead), RSS, USS, CPU %, GC collections
per second of generations 0/1/2, GC pause p99 and max (since the process started),
records/s in and out, consumer lag, and a broker's damaged replicas (offline for damaged
bytes, or healing from an intact leader: ``replica_proc.damaged_replicas``). Rates come
from two publishes of the same process (``rows``), so the first frame shows them after one
interval. ``--once`` prints one frame (after two reads ``--interval`` apart) and exits;
``--once --json`` prints every field of every process as one JSON object instead
(``{"cluster_id", "time", "processes": [...]}``).

Exit status 0; 1 with one line on stderr when D holds no cluster or a page cannot be read;
Ctrl-C and SIGTERM end the live view with 0. Owner: the main thread.
"""
from __future__ import annotations

import json
import os
import sys
import time

from cluster.errors import KafkaError
from cluster.tools.observe import pages
from cluster.tools.observe.rows import SORT_KEYS, RateTracker, sort_rows
from cluster.tools.support import ToolError, fail, stop_on_sigterm

_MIB = 1024 * 1024
#: Characters per line of ``--once``'s table when stdout is not a terminal.
PIPED_WIDTH = 200


def _rate(value, digits=1):
    return "-" if value is None else f"{value:,.{digits}f}"


def _ms(seconds):
    return f"{seconds * 1000:.2f}"


#: A broker's replicas that are offline for damage or healing from it (broker_stats).
DAMAGED = "damaged-partitions"

#: Columns of the table: (heading, how a row shows it).
COLUMNS = (
    ("ROLE", lambda r: r.role),
    ("NAME", lambda r: r.name),
    ("PID", lambda r: str(r.pid)),
    ("STATE", lambda r: r.state),
    ("RSS MiB", lambda r: f"{r.rss / _MIB:.1f}"),
    ("USS MiB", lambda r: f"{r.uss / _MIB:.1f}"),
    ("CPU %", lambda r: _rate(r.cpu_percent)),
    ("GC0/s", lambda r: _rate(r.gc_collections_per_s and r.gc_collections_per_s[0])),
    ("GC1/s", lambda r: _rate(r.gc_collections_per_s and r.gc_collections_per_s[1])),
    ("GC2/s", lambda r: _rate(r.gc_collections_per_s and r.gc_collections_per_s[2], 2)),
    ("PAUSE p99 ms", lambda r: _ms(r.gc_pause_p99)),
    ("PAUSE max ms", lambda r: _ms(r.gc_pause_max)),
    ("IN rec/s", lambda r: _rate(r.records_in_per_s, 0)),
    ("OUT rec/s", lambda r: _rate(r.records_out_per_s, 0)),
    ("LAG", lambda r: "-" if r.lag is None else f"{r.lag:,.0f}"),
    ("DAMAGED", lambda r: "-" if (n := r.counters.get(DAMAGED)) is None else f"{n:,.0f}"),
)
_STATE_STYLES = {"alive": "", "stale": "yellow", "dead": "red"}


def add_arguments(parser):
    parser.add_argument("--data-dir", required=True, metavar="D",
                        help="the cluster's data directory")
    parser.add_argument("--sort", default="role", choices=sorted(SORT_KEYS), metavar="COLUMN",
                        help=f"order of the rows: {', '.join(SORT_KEYS)} (default role; "
                             f"figures largest first)")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds between reads of the pages (default 1)")
    parser.add_argument("--once", action="store_true",
                        help="print one frame (two reads --interval apart) and exit")
    parser.add_argument("--json", action="store_true",
                        help="with --once: every field of every process as JSON")


def run(args):
    try:
        if args.interval <= 0:
            raise ToolError(f"--interval must be positive, found {args.interval}")
        if args.json and not args.once:
            raise ToolError("--json goes with --once")
        data_dir = os.path.abspath(args.data_dir)
        cluster = pages.cluster_id(data_dir)
        with stop_on_sigterm():
            if args.once:
                return _once(cluster, args)
            return _live(cluster, args)
    except KeyboardInterrupt:
        return 0
    except (ToolError, OSError, ValueError, KafkaError) as exc:
        return fail(exc, "top: ")


def two_reads(cluster, interval, read=None, sleep=time.sleep):
    """Rows of ``cluster`` with rates: a read (``read(cluster)``, default
    ``pages.read_pages``), ``interval`` seconds, a read; processes alive but not
    republished by then are read again (every ``interval`` / 4) until they are, for at
    most three of their publishing intervals."""
    read = read or pages.read_pages
    tracker = RateTracker()
    tracker.update(read(cluster))
    sleep(interval)
    found = read(cluster)
    current = tracker.update(found)
    waiting = tracker.missing_rates(found)
    if waiting:
        deadline = time.monotonic() + 3 * max(s.interval for s in waiting)
        while waiting and time.monotonic() < deadline:
            sleep(interval / 4)
            found = read(cluster)
            current = tracker.update(found)
            waiting = tracker.missing_rates(found)
    return current


def _once(cluster, args):
    found = sort_rows(two_reads(cluster, args.interval), args.sort)
    if args.json:
        json.dump({"cluster_id": cluster, "time": time.time(),
                   "processes": [r.to_json() for r in found]}, sys.stdout)
        sys.stdout.write("\n")
    else:
        _console().print(table(cluster, found))
    return 0


def _console():
    """rich's console on stdout; piped, wide enough for every column (a terminal's width
    would cut them)."""
    from rich.console import Console
    return Console(width=None if sys.stdout.isatty() else PIPED_WIDTH)


def _live(cluster, args):
    from rich.live import Live

    tracker = RateTracker()
    frame = table(cluster, sort_rows(tracker.update(pages.read_pages(cluster)), args.sort))
    with Live(frame, console=_console(), refresh_per_second=4, screen=False) as live:
        while True:
            time.sleep(args.interval)
            live.update(table(cluster, sort_rows(tracker.update(pages.read_pages(cluster)),
                                                 args.sort)))


def table(cluster, found):
    """The rich Table of ``found`` rows, titled with the cluster id and the time."""
    from rich.table import Table

    title = (f"ringlog top: cluster {cluster}, {len(found)} processes, "
             f"{time.strftime('%H:%M:%S')}")
    shown = Table(title=title, title_justify="left")
    for heading, _ in COLUMNS:
        shown.add_column(heading, justify="left" if heading in ("ROLE", "NAME", "STATE")
                         else "right", no_wrap=True)
    for r in found:
        shown.add_row(*(cell(r) for _, cell in COLUMNS), style=_STATE_STYLES[r.state])
    return shown
