"""Reading every stats page of a cluster: what ``ringlog top`` / ``metrics`` / ``profile`` call.

- ``list_pages(cluster_id)``: the names of the cluster's stats pages in /dev/shm
  (``/ringlog.<cluster>.stats.<pid>``), sorted by pid.
- ``read_all(cluster_id)``: one ``ProcessSnapshot`` per page of a running process that
  has been published at least once, sorted by (role, name, pid). A page whose process is
  gone — no process with its pid and start time (a reused pid is not taken for the page's
  process): SIGKILLed, crashed before its atexit, a Spark worker ended with ``os._exit`` —
  is unlinked and left out, at every read, so dead processes never pile up in ``ringlog
  top`` / ``metrics`` / ``profile``. ``stale``: alive, but the page was not updated for
  ``STALE_INTERVALS`` publishing intervals (hung, SIGSTOPped). A page that vanishes or is
  torn while being read is skipped.
- ``reap_dead(cluster_id)``: unlink the pages whose process is gone and return their names;
  never the page of a live process. The supervisor calls it at cluster start and stop,
  beside ``shm_ring.cleanup_stale``.

Reading costs the processes nothing: each page is mapped, copied and unmapped by the
caller. Any thread; no state kept between calls.
"""
from __future__ import annotations

import os
import time

import posix_ipc

from cluster.stats.page import StatsPage, TornPageError
from cluster.stats.snapshot import ProcessSnapshot
from shm_ring.liveness import is_alive
from shm_ring.naming import PREFIX, SHM_DIRECTORY, check_cluster_id, stats_page_pid

STALE_INTERVALS = 3
"""Publishing intervals without an update after which a live process's page is stale."""


def list_pages(cluster_id: str) -> list[str]:
    """Names of the stats pages of ``cluster_id``, by pid."""
    stem = f"{PREFIX}.{check_cluster_id(cluster_id)}."
    found = []
    for entry in os.listdir(SHM_DIRECTORY):
        if entry.startswith(stem):
            pid = stats_page_pid(cluster_id, "/" + entry)
            if pid is not None:
                found.append((pid, "/" + entry))
    return [name for _, name in sorted(found)]


def read_page(name: str, now: float | None = None) -> ProcessSnapshot | None:
    """The snapshot of one page; None if it has not been published yet. FileNotFoundError
    if it is gone; ValueError if it is not a stats page; TornPageError."""
    return _snapshot(_read_contents(name), time.time() if now is None else now)


def _read_contents(name):
    with StatsPage.open(name) as page:
        return page.read()


def _snapshot(contents, now):
    figures = contents.figures
    if figures is None:
        return None
    header = contents.header
    alive = is_alive(header.pid, header.start_ticks)
    stale = alive and now - figures.updated > STALE_INTERVALS * header.interval
    return ProcessSnapshot(
        role=header.role, name=header.name, pid=header.pid, start_time=header.start_time,
        updated=figures.updated, interval=header.interval, alive=alive, stale=stale,
        rss=figures.rss, uss=figures.uss, pss=figures.pss, cpu_user=figures.cpu_user,
        cpu_system=figures.cpu_system, ctx_voluntary=figures.ctx_voluntary,
        ctx_involuntary=figures.ctx_involuntary, threads=figures.threads, gc=figures.gc,
        counters=figures.counters, histograms=figures.histograms)


def read_all(cluster_id: str) -> list[ProcessSnapshot]:
    """A snapshot of every published page of a running process of the cluster; the pages
    of processes that are gone are unlinked (see the module doc)."""
    now = time.time()
    snapshots = []
    for name in list_pages(cluster_id):
        try:
            contents = _read_contents(name)
        except (FileNotFoundError, PermissionError, ValueError, TornPageError):
            continue  # unlinked meanwhile, not ours, or rewritten all along
        header = contents.header
        if not is_alive(header.pid, header.start_ticks):
            _unlink(name)
            continue
        snapshot = _snapshot(contents, now)
        if snapshot is not None:
            snapshots.append(snapshot)
    return sorted(snapshots, key=lambda s: (s.role, s.name, s.pid))


def reap_dead(cluster_id: str) -> list[str]:
    """Unlink the pages of the cluster whose process is gone; return their names."""
    removed = []
    for name in list_pages(cluster_id):
        try:
            with StatsPage.open(name) as page:
                header = page.header
        except (FileNotFoundError, PermissionError):
            continue  # gone, or another user's (shm_ring.naming.SquattedNameError)
        except ValueError:  # not a page of this layout: no pid to trust, leave it
            continue
        if not is_alive(header.pid, header.start_ticks) and _unlink(name):
            removed.append(name)
    return removed


def _unlink(name: str) -> bool:
    """Unlink the page of a process found dead; False if it was removed meanwhile. (A page
    is named by its process's pid: another process with that pid would first have to
    start, find the name taken and replace the page, between the check and here.)"""
    try:
        posix_ipc.unlink_shared_memory(name)
    except (posix_ipc.ExistentialError, posix_ipc.PermissionsError):
        return False  # removed meanwhile (or replaced by another user's)
    return True
