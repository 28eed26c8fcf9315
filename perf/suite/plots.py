"""PNG plots of a results document (matplotlib, Agg backend: no display needed).

* ``<stamp>-partitions.png``  end-to-end records/s and broker RSS against partitions (w5)
* ``<stamp>-processes.png``   aggregate records/s and RSS per client against processes (w6)
* ``<stamp>-record-size.png`` records/s and MB/s against value size (w7)
* ``<stamp>-latency.png``     latency histograms per rate, one line per peer (w4)

A plot whose workload did not run is not made. Functions only; the suite's main thread.
"""
from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

_MB = 1e6


def _series(workload, name):
    """{peer: ([x], [value])} of figure ``name`` over the successful cases."""
    out = {}
    for entry in workload["cases"]:
        value = (entry.get("figures") or {}).get(name)
        if value is None:
            continue
        xs, ys = out.setdefault(entry["peer"], ([], []))
        xs.append(entry["x"])
        ys.append(value)
    for xs, ys in out.values():
        order = sorted(range(len(xs)), key=xs.__getitem__)
        xs[:] = [xs[i] for i in order]
        ys[:] = [ys[i] for i in order]
    return out


def _lines(axes, series, scale=1.0):
    for peer, (xs, ys) in series.items():
        axes.plot(xs, [y / scale for y in ys], marker="o", label=peer)


def _log_x(axes, series):
    """A log x axis labelled with the measured points as plain numbers."""
    axes.set_xscale("log")
    ticks = sorted({x for xs, _ in series.values() for x in xs})
    axes.xaxis.set_major_locator(FixedLocator(ticks))
    axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    axes.xaxis.set_minor_locator(NullLocator())


def _scaling(doc, key, axis, second, second_label, title, path):
    workload = doc["workloads"].get(key)
    if not workload:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    rates = _series(workload, "e2e_rps")
    _lines(left, rates)
    left.set_ylabel("end-to-end records/s")
    _lines(right, _series(workload, second), scale=_MB)
    right.set_ylabel(second_label)
    for axes in (left, right):
        axes.set_xlabel(axis)
        _log_x(axes, rates)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _record_size(doc, path):
    workload = doc["workloads"].get("7")
    if not workload:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    rates = _series(workload, "e2e_rps")
    _lines(left, rates)
    left.set_ylabel("end-to-end records/s")
    _lines(right, _series(workload, "e2e_mb_s"))
    right.set_ylabel("end-to-end MB/s")
    for axes in (left, right):
        axes.set_xlabel("value bytes")
        _log_x(axes, rates)
        axes.set_yscale("log")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
    fig.suptitle("workload 7: throughput against record size")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _latency(doc, path):
    workload = doc["workloads"].get("4")
    if not workload:
        return None
    rates = sorted({e["x"] for e in workload["cases"]})
    fig, panels = plt.subplots(1, len(rates), figsize=(5.5 * len(rates), 4.2), squeeze=False)
    for axes, rate in zip(panels[0], rates):
        for entry in workload["cases"]:
            histogram = ((entry.get("figures") or {}).get("latency") or {}).get("histogram")
            if entry["x"] != rate or not histogram:
                continue
            edges, counts = histogram["edges_us"], histogram["counts"]
            total = sum(counts) or 1
            axes.stairs([c / total for c in counts], edges, label=entry["peer"])
        axes.set_xscale("log")
        axes.set_xlabel("latency µs (send → receive)")
        axes.set_ylabel("fraction of records")
        axes.set_title(f"{rate:,} records/s")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
    fig.suptitle("workload 4: latency histogram")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def make_plots(doc, directory, stamp):
    """Write every plot the document has data for; return their paths."""
    os.makedirs(directory, exist_ok=True)
    base = os.path.join(directory, stamp)
    made = [
        _scaling(doc, "5", "partitions", "server_peak_rss", "server peak RSS MB",
                 "workload 5: throughput and broker memory against partitions",
                 f"{base}-partitions.png"),
        _scaling(doc, "6", "client processes", "client_peak_rss_mean",
                 "peak RSS per client process MB",
                 "workload 6: aggregate throughput against client processes",
                 f"{base}-processes.png"),
        _record_size(doc, f"{base}-record-size.png"),
        _latency(doc, f"{base}-latency.png"),
    ]
    return [path for path in made if path]
