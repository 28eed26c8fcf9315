"""PNG plots of a results document (matplotlib, Agg backend: no display needed).

* ``<stamp>-partitions.png``  end-to-end records/s and broker RSS against partitions (w5)
* ``<stamp>-processes.png``   aggregate records/s and RSS per client against processes (w6)
* ``<stamp>-record-size.png`` records/s and MB/s against value size (w7)
* ``<stamp>-latency.png``     latency histograms per rate, one line per peer (w4)

Axes span the data, not the range a figure could take: the latency histograms' x axis runs
from the first to the last non-empty bin of any peer (``histogram_span``; the bins
themselves cover 1 µs to 10 s), and ticks read as plain numbers (``12,000``, ``300 µs``,
``30 ms``), not powers of ten.

A plot whose workload did not run is not made. Functions only; the suite's main thread.
"""
from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator

_MB = 1e6
#: Ticks of a log axis: 1, 2 and 5 times each power of ten.
_LOG_SUBS = (1.0, 2.0, 5.0)


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


def _plain(value, _=None):
    """A tick as a plain number: 12,000, 200, 54.5, 0.5."""
    if value == round(value) or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _duration_us(value, _=None):
    if value >= 1e6:
        return f"{value / 1e6:g} s"
    return f"{value / 1e3:g} ms" if value >= 1e3 else f"{value:g} µs"


def _log_x(axes, series):
    """A log x axis labelled with the measured points as plain numbers."""
    axes.set_xscale("log")
    ticks = sorted({x for xs, _ in series.values() for x in xs})
    axes.xaxis.set_major_locator(FixedLocator(ticks))
    axes.xaxis.set_major_formatter(FuncFormatter(_plain))
    axes.xaxis.set_minor_locator(NullLocator())


def _log_ticks(axis, formatter=_plain):
    """Ticks at 1, 2, 5 × 10^n of a log ``axis`` (``axes.xaxis``/``yaxis``), as plain
    numbers."""
    axis.set_major_locator(LogLocator(base=10, subs=_LOG_SUBS))
    axis.set_major_formatter(FuncFormatter(formatter))
    axis.set_minor_locator(NullLocator())


def _save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def histogram_span(histograms):
    """(low, high) µs around the non-empty bins of ``histograms`` (``edges_us``/``counts``
    dicts), one bin of margin each side; None when every one is empty."""
    low = high = None
    for histogram in histograms:
        edges, counts = histogram["edges_us"], histogram["counts"]
        filled = [i for i, count in enumerate(counts) if count]
        if not filled:
            continue
        first, last = max(filled[0] - 1, 0), min(filled[-1] + 2, len(edges) - 1)
        low = edges[first] if low is None else min(low, edges[first])
        high = edges[last] if high is None else max(high, edges[last])
    return None if low is None else (low, high)


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
        axes.yaxis.set_major_formatter(FuncFormatter(_plain))
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
    fig.suptitle(title)
    return _save(fig, path)


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
        _log_ticks(axes.yaxis)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
    fig.suptitle("workload 7: throughput against record size")
    return _save(fig, path)


def latency_figure(doc):
    """The figure of workload 4's histograms (one panel per rate, one line per peer, the x
    axis the same ``histogram_span`` in every panel), or None when it did not run."""
    workload = doc["workloads"].get("4")
    if not workload:
        return None
    histograms = {}  # (rate, peer): histogram
    for entry in workload["cases"]:
        histogram = ((entry.get("figures") or {}).get("latency") or {}).get("histogram")
        if histogram:
            histograms[entry["x"], entry["peer"]] = histogram
    span = histogram_span(histograms.values())
    rates = sorted({e["x"] for e in workload["cases"]})
    fig, panels = plt.subplots(1, len(rates), figsize=(5.5 * len(rates), 4.2), squeeze=False)
    for axes, rate in zip(panels[0], rates):
        for (x, peer), histogram in histograms.items():
            if x != rate:
                continue
            counts = histogram["counts"]
            total = sum(counts) or 1
            axes.stairs([c / total for c in counts], histogram["edges_us"], label=peer)
        axes.set_xscale("log")
        if span:
            axes.set_xlim(*span)
        _log_ticks(axes.xaxis, _duration_us)
        axes.set_xlabel("latency (send → receive)")
        axes.set_ylabel("fraction of records")
        axes.set_title(f"{rate:,} records/s")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
    fig.suptitle("workload 4: latency histogram")
    return fig


def _latency(doc, path):
    fig = latency_figure(doc)
    return None if fig is None else _save(fig, path)


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
