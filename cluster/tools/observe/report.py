"""What ``ringlog profile`` writes from its samples, and the per-process table ``make demo``
ends with.

- ``samples.json``: ``{"run": {...}, "samples": [{"t", "processes": [snapshot fields]}]}``.
- ``rss.png``: RSS of every process over time.
- ``gc_latency.png``: GC pause time per second of every process, above the request latency
  p99 of each interval (a bucket's upper bound, from the difference of the latency
  histograms): producers' produce requests and brokers' request handling
  (``rows.REQUEST_LATENCY``; a consumer's fetch, which waits for records by design, is not
  latency).
- ``throughput.png``: records/s in (solid) and out (dashed) per process.
- ``rings.png``: per broker, the occupancy of the rings of its client connections in % of
  their capacity (``ring_series``): the fullest ring and all of them together, under a
  line at 100 % naming one ring's capacity (there its writer waits).

Processes are labelled ``role name (pid)``, the role as ``rows.role`` shows it (a process
with a producer and a consumer is both).
- ``summary.txt`` (``summary``): peak RSS per role, GC time share per process, the longest
  pause, what grew most.

matplotlib draws off-screen (Agg), imported only when a PNG is drawn. Pure functions of the
samples besides the writers; owner: the caller's thread.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os

from cluster.tools.observe.rows import (
    RECORDS_IN,
    RECORDS_OUT,
    first_counter,
    gc_pauses,
    histogram_delta,
    key,
    request_latency,
    role,
)

SAMPLES_JSON = "samples.json"
SUMMARY_TXT = "summary.txt"
PNGS = ("rss.png", "gc_latency.png", "throughput.png", "rings.png")
_MIB = 1024 * 1024
#: Processes named in "what grew most".
GREW_SHOWN = 3


def label(snapshot):
    return f"{role(snapshot)} {snapshot.name} ({snapshot.pid})"


def timelines(samples):
    """{process key: [(t, snapshot), ...]} in sample order, one entry per distinct publish
    (a page read twice between two publishes counts once)."""
    found = collections.defaultdict(list)
    for sample in samples:
        for snapshot in sample.processes:
            line = found[key(snapshot)]
            if not line or line[-1][1].updated != snapshot.updated:
                line.append((sample.t, snapshot))
    return dict(found)


def _pairs(line):
    """Consecutive publishes of one process with time between them: (before, after, dt)."""
    for (_, before), (_, after) in zip(line, line[1:]):
        elapsed = after.updated - before.updated
        if elapsed > 0:
            yield before, after, elapsed


def to_json(samples, run):
    return {"run": run,
            "samples": [{"t": s.t, "processes": [dataclasses.asdict(p) for p in s.processes]}
                        for s in samples]}


def write_json(folder, samples, run):
    path = os.path.join(folder, SAMPLES_JSON)
    with open(path, "w", encoding="utf-8") as file:
        json.dump(to_json(samples, run), file)
    return path


# -- figures ---------------------------------------------------------------------------------

def summary(samples):
    """The text of ``summary.txt`` (module doc)."""
    lines = timelines(samples)
    if not lines:
        return "no process published a stats page during the run\n"
    last = {k: line[-1][1] for k, line in lines.items()}
    out = [f"{len(lines)} processes sampled, {len(samples)} samples over "
           f"{samples[-1].t - samples[0].t:.1f} s", "", "peak RSS per role:"]
    by_role = collections.defaultdict(list)
    for line in lines.values():
        peak = max(line, key=lambda entry: entry[1].rss)[1]
        by_role[role(peak)].append(peak)
    for shown, peaks in sorted(by_role.items()):
        top = max(peaks, key=lambda s: s.rss)
        out.append(f"  {shown:<17} {top.rss / _MIB:8.1f} MiB  ({label(top)}; "
                   f"{len(peaks)} processes)")
    out += ["", "GC time share (pause time / wall time while sampled):"]
    for line in sorted(lines.values(), key=lambda ln: label(ln[-1][1])):
        first, final = line[0][1], line[-1][1]
        wall = final.updated - first.updated
        paused = gc_pauses(final).total - gc_pauses(first).total
        share = f"{100 * paused / wall:6.2f} %" if wall > 0 else "     - "
        collections_ = sum(g.collections for g in final.gc) - sum(g.collections
                                                                  for g in first.gc)
        out.append(f"  {label(final):<40} {share}  ({paused * 1000:.1f} ms in "
                   f"{collections_} collections)")
    longest = max(last.values(), key=lambda s: gc_pauses(s).max)
    generation = max(range(3), key=lambda n: longest.gc[n].pause_max)
    out += ["", f"longest GC pause: {gc_pauses(longest).max * 1000:.2f} ms, generation "
                f"{generation}, {label(longest)} (since the process started)", "",
            "what grew most (RSS, first to last sample):"]
    growth = sorted(((line[-1][1].rss - line[0][1].rss, line[-1][1]) for line in lines.values()),
                    key=lambda g: -g[0])
    for grew, snapshot in growth[:GREW_SHOWN]:
        out.append(f"  {label(snapshot):<40} {grew / _MIB:+8.1f} MiB")
    gauges = [(line[-1][1].counters[name] - line[0][1].counters[name], name, line[-1][1])
              for line in lines.values() for name in line[-1][1].counters
              if not name.endswith("-total") and name in line[0][1].counters]
    gauges = [g for g in gauges if g[0] > 0]
    if gauges:
        grew, name, snapshot = max(gauges, key=lambda g: g[0])
        out.append(f"  gauge: {name} of {label(snapshot)} {grew:+,.0f}")
    return "\n".join(out) + "\n"


def process_table(samples):
    """One line per process seen: peak RSS, GC collections per generation, longest GC
    pause, CPU seconds (user + system), as ``make demo`` ends with."""
    lines = timelines(samples)
    header = (f"{'ROLE':<17} {'NAME':<24} {'PID':>7} {'PEAK RSS MiB':>12} "
              f"{'GC COLLECTIONS 0/1/2':>22} {'LONGEST GC ms':>13} {'CPU s':>8}")
    rows = [header]
    for line in sorted(lines.values(), key=lambda ln: (role(ln[-1][1]), ln[-1][1].name,
                                                       ln[-1][1].pid)):
        final = line[-1][1]
        peak = max(s.rss for _, s in line)
        gcs = "/".join(str(g.collections) for g in final.gc)
        rows.append(f"{role(final):<17} {final.name[:24]:<24} {final.pid:>7} "
                    f"{peak / _MIB:>12.1f} {gcs:>22} {gc_pauses(final).max * 1000:>13.2f} "
                    f"{final.cpu_user + final.cpu_system:>8.2f}")
    return "\n".join(rows)


# -- PNGs ------------------------------------------------------------------------------------

def write_pngs(folder, samples):
    """The four PNGs (module doc) in ``folder``; their paths."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    lines = timelines(samples)
    start = samples[0].t if samples else 0.0
    paths = []
    for name, draw in zip(PNGS, (_rss, _gc_latency, _throughput, _rings)):
        figure = draw(plt, lines, start)
        path = os.path.join(folder, name)
        figure.tight_layout()
        figure.savefig(path, dpi=90)
        plt.close(figure)
        paths.append(path)
    return paths


def _empty(axis, text):
    axis.text(0.5, 0.5, text, ha="center", va="center",
              transform=axis.transAxes, color="grey")


def _rss(plt, lines, start):
    figure, axis = plt.subplots(figsize=(11, 5))
    for line in lines.values():
        axis.plot([t - start for t, _ in line], [s.rss / _MIB for _, s in line],
                  label=label(line[-1][1]), marker=".")
    axis.set(title="RSS per process", xlabel="seconds since the first sample", ylabel="MiB")
    _legend(axis, lines)
    return figure


def _gc_latency(plt, lines, start):
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(11, 7))
    latency_drawn = False
    for line in lines.values():
        name = label(line[-1][1])
        pairs = list(_pairs(line))
        xs = [after.updated - start for _, after, _ in pairs]
        top.plot(xs, [1000 * (gc_pauses(a).total - gc_pauses(b).total) / dt
                      for b, a, dt in pairs], label=name, marker=".")
        points = []
        for before, after, _ in pairs:
            now, then = request_latency(after), request_latency(before)
            if now is not None:
                delta = histogram_delta(then, now)
                if delta.count:
                    points.append((after.updated - start, delta.quantile(0.99)))
        if points:
            latency_drawn = True
            bottom.plot(*zip(*points), label=name, marker=".")
    top.set(title="GC pause time per process", ylabel="ms paused per second of wall time")
    bottom.set(title="request latency p99 per interval: producers' produce requests, brokers' "
                     "request handling\n(consumers' fetches are left out: they wait for "
                     "records by design, up to fetch.max.wait.ms)",
               xlabel="seconds since the first sample", ylabel="ms")
    _legend(top, lines)
    if latency_drawn:
        bottom.legend(fontsize="x-small", loc="upper left")
    else:
        _empty(bottom, "no produce request answered or request handled while sampled")
    return figure


def _throughput(plt, lines, start):
    figure, axis = plt.subplots(figsize=(11, 5))
    drawn = False
    for line in lines.values():
        pairs = list(_pairs(line))
        colour = None  # a process's in and out lines share a colour
        for names, style, way in ((RECORDS_IN, "-", "in"), (RECORDS_OUT, "--", "out")):
            points = []
            for b, a, dt in pairs:
                now, then = first_counter(a.counters, names), first_counter(b.counters, names)
                if now is not None and then is not None:
                    points.append((a.updated - start, (now - then) / dt))
            if points:
                drawn = True
                colour = axis.plot(*zip(*points), style, marker=".", color=colour,
                                   label=f"{label(line[-1][1])} {way}")[0].get_color()
    axis.set(title="throughput: records/s in (solid: appended by a broker, consumed by a "
                   "client) and out (dashed: sent by a client)",
             xlabel="seconds since the first sample", ylabel="records/s")
    if drawn:
        axis.legend(fontsize="x-small", loc="upper left", ncol=2)
    else:
        _empty(axis, "no records counted while sampled")
    return figure


#: The broker's ring figures (``replica_proc.broker_stats``).
RING_FULLEST = "ring-occupancy-percent-max"
RING_BYTES = "ring-occupancy-bytes"
RING_CAPACITY = "ring-capacity-bytes"
RING_COUNT = "ring-count"


def ring_series(line, start):
    """A process's ring occupancy for ``rings.png``: ``(fullest, together, ring sizes)``,
    the first two lists of ``(seconds since start, % of capacity)`` — the fullest ring's,
    and all rings' bytes over their capacities added — the last the set of the one-ring
    capacities seen (bytes); None when the process publishes no ring figures."""
    fullest, together, sizes = [], [], set()
    for t, s in line:
        counters = s.counters
        if RING_FULLEST not in counters:
            continue
        fullest.append((t - start, counters[RING_FULLEST]))
        capacity, count = counters.get(RING_CAPACITY, 0), counters.get(RING_COUNT, 0)
        if capacity > 0 and count > 0:
            together.append((t - start, 100.0 * counters.get(RING_BYTES, 0) / capacity))
            sizes.add(capacity / count)
    return (fullest, together, sizes) if fullest else None


def _size(count):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:g} {unit}"
    return f"{count:g} B"


def _rings(plt, lines, start):
    figure, axis = plt.subplots(figsize=(11, 5))
    sizes = set()
    for line in lines.values():
        found = ring_series(line, start)
        if found is None:
            continue
        fullest, together, seen = found
        sizes |= seen
        drawn = axis.plot(*zip(*fullest), marker=".",
                          label=f"{label(line[-1][1])}: the fullest ring")
        if together:
            axis.plot(*zip(*together), linestyle="--", color=drawn[0].get_color(),
                      label=f"{label(line[-1][1])}: all its rings together")
    axis.set(title="ring occupancy of each broker's client connections: bytes written, "
                   "not yet read, in % of capacity",
             xlabel="seconds since the first sample", ylabel="% of ring capacity")
    if sizes:
        capacity = ", ".join(_size(size) for size in sorted(sizes))
        axis.axhline(100, color="red", linewidth=1,
                     label=f"capacity: {capacity} per ring (a full ring makes its writer "
                           f"wait)")
        axis.set_ylim(0, 110)
        axis.legend(fontsize="x-small", loc="upper left")
    else:
        _empty(axis, "no broker published ring figures while sampled")
    return figure


def _legend(axis, lines):
    if lines:
        axis.legend(fontsize="x-small", loc="upper left", ncol=2)
    else:
        _empty(axis, "no stats page found")
