"""The suite's tables (rich): the machine, one table per workload with ringlog and each peer
side by side, and the project's goals met or not.

Throughput tables: records/s of the producers, of the consumers and end to end, MB/s end to
end, peak RSS of the servers (brokers, redis-server) and of the client processes, and how
much faster or slower ringlog is than the row's peer on end-to-end records/s. The latency
table: achieved rate, p50/p99/p99.9 and max in µs, and how much faster or slower ringlog is
than the row's peer on p99 (``results.speed``: one wording for rates and latencies).

Reads a ``results.Results`` document only; the suite's main thread calls it.
"""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from perf.suite.goals import BEHIND
from perf.suite.peers import BASELINE
from perf.suite.results import figure, speed
from perf.suite.workloads import LATENCY_WORKLOADS, SELF_COMPARED

_MB = 1e6
_AXES = {5: "partitions", 6: "processes", 7: "value bytes", 4: "rate /s", 8: "setting",
         9: "setting"}


def _num(value, digits=0):
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _mb(value):
    return "-" if not value else f"{value / _MB:,.0f}"


def machine_table(machine):
    table = Table(title="machine", box=box.SIMPLE, show_header=False)
    table.add_column("what")
    table.add_column("value")
    rows = [("cpu", f"{machine.get('cpu_model')} ({machine.get('cpus_usable')} usable of "
                    f"{machine.get('cpus')})"),
            ("memory", f"{machine.get('memory_bytes', 0) / 2**30:.1f} GiB"),
            ("os / python", f"{machine.get('platform')} / {machine.get('python')}"),
            ("redis-server", machine.get("redis_server") or "not found"),
            ("memcpy", f"{_num(machine.get('memcpy_gb_s'), 1)} GB/s"),
            ("record paths", machine.get("codec") or "-"),
            ("sequential write + fsync", f"{_num(machine.get('write_mb_s'))} MB/s"),
            ("load average start → end",
             f"{_load(machine.get('load_average'))} → {_load(machine.get('load_average_end'))}")]
    for name, value in rows:
        table.add_row(name, str(value))
    return table


def producer_perf_table(figures):
    """producer-perf-test's records/s beside confluent-kafka's produce() calls/s (no
    broker)."""
    table = Table(title="producer-perf-test: 100 B, acks=1, 1 partition", box=box.SIMPLE_HEAD)
    table.add_column("producer")
    table.add_column("records/s", justify="right")
    table.add_column("what", justify="left")
    what = {"ringlog": "ringlog producer-perf-test, first send to last acknowledgement",
            "confluent_kafka": "confluent-kafka produce() calls, no broker, no delivery"}
    for name, entry in figures.items():
        rate = (f"[red]failed: {entry['error'][:60]}[/red]" if "error" in entry
                else _num(entry.get("rps")))
        table.add_row(name, rate, what.get(name, ""))
    return table


def _load(values):
    return "-" if not values else " ".join(f"{v:.2f}" for v in values)


def workload_table(key, workload):
    number = int(key)
    if number in LATENCY_WORKLOADS:
        return _latency_table(key, workload)
    axis = _AXES.get(number)
    table = Table(title=f"workload {key}: {workload['title']}", box=box.SIMPLE_HEAD)
    table.add_column("peer")
    if axis:
        table.add_column(axis, justify="right")
    for name in ("producer rec/s", "consumer rec/s", "end-to-end rec/s", "MB/s",
                 "server RSS MB", "client RSS MB", "ringlog vs this peer"):
        table.add_column(name, justify="right")
    table.caption = "ringlog vs this peer: ringlog's end-to-end records/s against the peer's"
    if number in SELF_COMPARED:
        table.caption = ("last column: the setting's end-to-end records/s against the first "
                         "setting's")
    ratios = _ratios(number, workload, "e2e_rps")
    for entry in sorted(workload["cases"], key=lambda e: (_order(e["x"]), e["peer"] != BASELINE)):
        cells = [entry["peer"]] + ([str(entry["x"])] if axis else [])
        if "error" in entry:
            table.add_row(*cells, f"[red]failed: {entry['error'].splitlines()[0][:80]}[/red]")
            continue
        f = entry["figures"]
        runs = [r for r in f.get("e2e_rps_runs", []) if r]
        e2e = _num(f.get("e2e_rps"))
        if len(runs) > 1:
            e2e += f" ({min(runs):,.0f}–{max(runs):,.0f})"
        lost = f" [red]{f['lost']:,} lost[/red]" if f.get("lost") else ""
        table.add_row(*cells, _num(f.get("producer_rps")), _num(f.get("consumer_rps")),
                      e2e + lost, _num(f.get("e2e_mb_s"), 1), _mb(f.get("server_peak_rss")),
                      _mb(f.get("client_peak_rss_mean")),
                      _versus(entry, ratios, "e2e_rps", number))
    return table


def _latency_table(key, workload):
    table = Table(title=f"workload {key}: {workload['title']} (µs, send → receive in "
                        f"another process)", box=box.SIMPLE_HEAD)
    number = int(key)
    axis = _AXES[number]
    for name in ("peer", axis, "achieved /s", "p50", "p99", "p99.9", "max",
                 "ringlog vs this peer (p99)"):
        table.add_column(name, justify="left" if name == "peer" else "right")
    table.caption = (f"* below {BEHIND:.0%} of the rate: the sender fell behind, and its "
                     f"latencies (from the actual send) leave out the time records waited")
    ratios = _ratios(number, workload, "p99")
    for entry in sorted(workload["cases"], key=lambda e: (_order(e["x"]), e["peer"] != BASELINE)):
        x = entry["x"]
        cells = [entry["peer"], x if isinstance(x, str) else _num(x)]
        rate = entry["params"].get("rate") or x  # workload 4: x is the rate
        if "error" in entry:
            table.add_row(*cells, f"[red]failed: {entry['error'].splitlines()[0][:80]}[/red]")
            continue
        achieved = entry["figures"].get("achieved_rate")
        behind = achieved is not None and achieved < BEHIND * rate
        table.add_row(*cells, f"[red]{_num(achieved)}*[/red]" if behind else _num(achieved),
                      *[_num(figure(entry, p), 0) for p in ("p50", "p99", "p99.9")],
                      _num((entry["figures"].get("latency") or {}).get("max")),
                      _versus(entry, ratios, "p99", number))
    return table


def _ratios(number, workload, figure_name):
    """(x, peer) -> ratio of ``figure_name``; for a self-compared workload, x -> ratio."""
    found = [r for r in workload["ratios"] if r["figure"] == figure_name]
    if number in SELF_COMPARED:
        return {r["x"]: r["ratio"] for r in found}
    return {(r["x"], r["peer"]): r["ratio"] for r in found}


def _versus(entry, ratios, figure_name, number):
    """The last cell of a case's row: "2.00× faster" / "3.10× slower" (ringlog against the
    row's peer), empty on ringlog's own row; in a self-compared workload, the row's setting
    against the first setting (empty on the first)."""
    if number in SELF_COMPARED:
        return speed(ratios[entry["x"]], figure_name) if entry["x"] in ratios else ""
    if entry["peer"] == BASELINE:
        return ""
    return speed(ratios.get((entry["x"], entry["peer"])), figure_name)


def _order(x):
    return (0, x) if isinstance(x, (int, float)) else (1, str(x))


def targets_table(targets):
    table = Table(title="the project's goals for ringlog", box=box.SIMPLE_HEAD)
    for name in ("figure", "goal", "measured", "met"):
        table.add_column(name)
    for t in targets:
        met = "-" if t["met"] is None else ("[green]yes[/green]" if t["met"] else
                                            "[red]no[/red]")
        if t.get("note"):
            met += "*"
        table.add_row(t["name"], t["goal"], t["measured"], met)
    notes = [t["note"] for t in targets if t.get("note")]
    if notes:
        table.caption = "* " + "; ".join(notes)
    return table


def print_report(doc, console=None):
    """Print every table of results document ``doc``."""
    console = console or Console(width=140)
    console.print(machine_table(doc["machine"]))
    if doc.get("producer_perf"):
        console.print(producer_perf_table(doc["producer_perf"]))
    for name, peer in doc["peers"].items():
        if not peer["available"]:
            console.print(f"[yellow]skipped {name}: {peer['reason']}[/yellow]")
    for key in sorted(doc["workloads"], key=int):
        console.print(workload_table(key, doc["workloads"][key]))
    console.print(targets_table(doc["targets"]))
    if doc.get("shm_leftovers"):
        console.print(f"[red]{len(doc['shm_leftovers'])} shared-memory objects left by stopped "
                      f"ringlog clusters (unlinked by the suite): "
                      f"{', '.join(doc['shm_leftovers'][:5])}[/red]")
