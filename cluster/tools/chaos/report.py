"""What a chaos run leaves in its output folder and prints: ``history.json`` (the
history, the schedule and the verdict) with ``history.npz`` (the history's per-record
columns, ``history.History.save_columns``), ``timeline.png`` and a summary.

``timeline.png``: acknowledged records per second, broker faults as dashed markers,
restarts and SIGCONTs as green dotted ones; below, the unavailability windows per partition
(``checker.unavailability``: each bar at least ``MIN_BAR`` of the run wide so that a
window of tens of milliseconds shows, its length written beside it); with the
transactional-copy workload, a panel of the copiers' events by copier (``copier_events``:
restarts, kills, zombies started, fencings, exits on an error).

matplotlib draws off-screen (the Agg backend), imported only when the PNG is drawn.
Owner: the command's main thread.
"""
from __future__ import annotations

import collections
import json
import os

import numpy as np

from cluster.tools.chaos.checker import outcomes_of
from cluster.tools.chaos.columns import OK, STALLED

HISTORY_JSON = "history.json"
HISTORY_COLUMNS = "history.npz"
TIMELINE_PNG = "timeline.png"
#: Seconds per throughput bucket in the timeline.
BUCKET = 0.5
#: Anomalies listed one by one in the summary, per kind (the rest are counted).
SHOWN = 5
_FAULT_COLOURS = {"kill": "red", "terminate": "orange", "pause": "purple",
                  "truncate": "brown", "divergent-writes": "magenta", "flip": "olive"}
#: Fault log events drawn as green dotted lines: a broker back.
_RECOVERIES = ("start", "resume")
#: The narrowest unavailability bar, as a share of the run's length.
MIN_BAR = 0.004
#: Copier events of the timeline: kind -> (marker, colour, legend).
COPIER_MARKERS = {
    "copier-start": ("^", "green", "copier restarted (a new incarnation)"),
    "copier-kill": ("X", "red", "copier SIGKILLed"),
    "zombie": ("D", "purple", "new incarnation beside a live one (zombie)"),
    "fenced": ("|", "black", "incarnation fenced (ProducerFencedError)"),
    "copier-exit": ("o", "grey", "incarnation exited on an error (not killed)"),
}


def copier_events(history):
    """``[(kind, t, copier)]`` of the copiers' lives (COPIER_MARKERS' kinds), by time:
    from the fault log (restarts — the first incarnations' starts are the set-up —, kills,
    zombies, exits with a code other than 0 or a SIGKILL's) and the copiers' own logs
    (fencings)."""
    events = [(f["fault"], f["t"], f["c"]) for f in history.faults
              if f["fault"] in COPIER_MARKERS and f.get("c") is not None
              and (f["fault"] != "copier-start" or f.get("i"))
              and (f["fault"] != "copier-exit" or f.get("exitcode") not in (0, -9, None))]
    events += [("fenced", op["t"], op["c"]) for op in history.copier_ops
               if op.get("op") == "fenced" and "t" in op]
    return sorted(events, key=lambda e: e[1])


def write_history(folder, history, verdict, schedule):
    """``history.json``: {"run", "schedule", "verdict", "history"} (the history but its
    per-record columns) and ``history.npz``: those columns; the JSON's path."""
    path = os.path.join(folder, HISTORY_JSON)
    with open(path, "w", encoding="utf-8") as file:
        json.dump({"run": history.run, "schedule": [s.to_json() for s in schedule],
                   "verdict": verdict.to_json(), "history": history.to_json()}, file)
    history.save_columns(os.path.join(folder, HISTORY_COLUMNS))
    return path


def write_timeline(folder, history, verdict):
    """``timeline.png`` (module doc); its path."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    ops = outcomes_of(history)
    start = history.run.get("start") or (float(ops.t.min()) if len(ops) else 0.0)
    partitions = history.run.get("partitions") or 1
    buckets = np.maximum(((ops.t - start) / BUCKET).astype(np.int64), 0)
    acks = dict(enumerate(np.bincount(buckets[ops.kind == OK]).tolist()))
    errors = dict(enumerate(np.bincount(buckets[ops.kind != OK]).tolist()))
    acks, errors = collections.Counter(acks), collections.Counter(errors)
    last = max(list(acks) + list(errors) + [1])
    xs = [b * BUCKET for b in range(last + 1)]
    copiers = copier_events(history)
    if copiers:
        figure, (top, bottom, lives) = plt.subplots(3, 1, sharex=True, figsize=(11, 8),
                                                    height_ratios=(2, 1, 1))
    else:
        figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(11, 6),
                                             height_ratios=(2, 1))
    top.plot(xs, [acks[b] / BUCKET for b in range(last + 1)], label="acknowledged/s")
    top.plot(xs, [errors[b] / BUCKET for b in range(last + 1)], label="failed or unknown/s",
             color="grey")
    for fault in history.faults:
        if fault["fault"] in _RECOVERIES:
            for axis in (top, bottom):
                axis.axvline(fault["t"] - start, color="green", linestyle=":", linewidth=0.8)
        colour = _FAULT_COLOURS.get(fault["fault"])
        if colour is not None:
            for axis in (top, bottom):
                axis.axvline(fault["t"] - start, color=colour, linestyle="--", linewidth=0.8)
            top.annotate(f"{fault['fault']} b{fault.get('broker')}",
                         (fault["t"] - start, top.get_ylim()[1]), rotation=90, fontsize=7,
                         va="top", ha="right", color=colour)
    top.set_ylabel("records/s")
    top.legend(loc="lower left", fontsize=8)
    top.set_title(f"ringlog chaos: {history.run.get('scenario')} seed {history.run.get('seed')}"
                  f" — {'no anomalies' if verdict.ok else verdict.by_kind()}", fontsize=9)
    narrowest = MIN_BAR * last * BUCKET
    for window in verdict.windows:
        at = window["start"] - start
        bottom.broken_barh([(at, max(window["seconds"], narrowest))],
                           (window["partition"] - 0.4, 0.8), color="tab:red", alpha=0.6)
        seconds = window["seconds"]
        bottom.annotate(f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s",
                        (at + max(seconds, narrowest), window["partition"]), fontsize=7,
                        xytext=(2, 0), textcoords="offset points", va="center")
    bottom.set_ylim(-0.5, partitions - 0.5)
    bottom.set_yticks(range(partitions))
    bottom.set_ylabel("partition")
    bottom.set_title("partition unavailable (no leader, leader down until the next "
                     "acknowledged send, produce errors, acks stalled > "
                     f"{STALLED:g} s)" if verdict.windows else
                     "partition unavailable: never, for the producers and the metadata",
                     fontsize=8)
    if copiers:
        _draw_copiers(lives, copiers, start, history.run.get("partitions") or 1)
    (lives if copiers else bottom).set_xlabel("seconds since the workload started")
    figure.tight_layout()
    path = os.path.join(folder, TIMELINE_PNG)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _draw_copiers(axis, events, start, copiers):
    for kind, (marker, colour, legend) in COPIER_MARKERS.items():
        points = [(t - start, copier) for k, t, copier in events if k == kind]
        if points:
            axis.scatter(*zip(*points), marker=marker, color=colour, label=legend, s=30)
    axis.set_ylim(-0.5, copiers + 0.7)  # a band above the copiers for the legend
    axis.set_yticks(range(copiers))
    axis.set_ylabel("copier")
    axis.set_title("copiers (transactional copy): their incarnations' lives", fontsize=8)
    axis.legend(loc="upper left", fontsize=7, ncol=3)


def summary(verdict):
    """The verdict as lines of text: counts, duplicates, unclean elections and their
    losses, unavailability, anomalies by kind."""
    counts = verdict.counts
    lines = [f"sent {counts['sent']}, acknowledged {counts['acknowledged']}, failed "
             f"{counts['failed']}, unknown {counts['unknown']}; read {counts['read']} by the "
             f"consumers, {counts['drained']} by the final drain; {counts['faults']} faults"]
    copy = verdict.copy
    if copy:
        lines.append(
            f"copied {copy['copied']} of {copy['input']} input records into "
            f"{copy['output']} output records; transactions: {copy['transactions_committed']}"
            f" committed, {copy['transactions_aborted']} aborted, "
            f"{copy['transactions_unknown']} of unknown outcome (a copier killed or fenced "
            f"after asking to commit; {copy['transactions_unknown_committed']} of them "
            f"committed), "
            f"{copy['transactions_never_committed']} never committed; "
            f"{copy['incarnations']} copier incarnations, {copy['copier_kills']} copier "
            f"kills, {copy['zombies']} zombies, {copy['fenced']} fenced, "
            f"{copy['copier_failures']} copier failures")
        lines.append(
            f"read_committed by the readers: {copy['read_committed_by_readers']}; "
            f"read_uncommitted at the end: {copy['read_uncommitted']}, of which "
            f"{copy['read_uncommitted_not_committed']} from transactions that did not "
            f"commit (expected)")
    if verdict.duplicates:
        why = ("idempotent producers: anomalies" if verdict.idempotent else
               "at-least-once without idempotence, not anomalies")
        lines.append(f"duplicates ({why}): {len(verdict.duplicates)}")
        for duplicate in verdict.duplicates[:SHOWN]:
            lines.append(f"  p{duplicate['producer']}:{duplicate['seq']} at "
                         f"{duplicate['at']}")
    for election in verdict.unclean_elections:
        lines.append(f"unclean election: partition {election['partition']} led by broker "
                     f"{election['leader']}, outside the ISR {election['isr']}")
    if verdict.unclean_losses:
        kinds = collections.Counter(a["kind"] for a in verdict.unclean_losses)
        lines.append(f"lost (unclean election, allowed): {kinds['lost']} records lost, "
                     f"{kinds['inconsistent-read']} offsets read with another value before")
        for loss in verdict.unclean_losses[:SHOWN]:
            lines.append("  " + json.dumps({k: v for k, v in loss.items() if k != "kind"}))
    if verdict.windows:
        longest = max(verdict.windows, key=lambda w: w["seconds"])
        lines.append(f"unavailable {sum(w['seconds'] for w in verdict.windows):.3f} s in "
                     f"total, longest {longest['seconds']:.3f} s (partition "
                     f"{longest['partition']})")
    for window in verdict.windows:
        lines.append(f"partition {window['partition']} unavailable for {window['seconds']:.3f}"
                     f" s ({', '.join(window['sources'])})")
    by_kind = collections.defaultdict(list)
    for anomaly in verdict.anomalies:
        by_kind[anomaly["kind"]].append(anomaly)
    for kind, anomalies in sorted(by_kind.items()):
        lines.append(f"{kind}: {len(anomalies)}")
        for anomaly in anomalies[:SHOWN]:
            lines.append("  " + json.dumps({k: v for k, v in anomaly.items() if k != "kind"}))
    lines.append("verdict: " + ("no anomalies" if verdict.ok else
                                f"{len(verdict.anomalies)} anomalies"))
    return lines
