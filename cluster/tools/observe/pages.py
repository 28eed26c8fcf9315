"""Reading the stats pages of the cluster in a data directory: its cluster id from
``meta.properties``, then every page published under that id (brokers, clients, tools).

Any thread; every call reads the pages afresh (a page costs its process nothing to read).
"""
from __future__ import annotations

import os

from cluster.metadata import data_dir as dd
from cluster.tools.support import ToolError


def cluster_id(data_dir, required=True):
    """The cluster id of ``data_dir``; ToolError naming the directory when it has none
    (None instead when not ``required``: a command may start the cluster later)."""
    found = dd.read_cluster_id(data_dir) if os.path.isdir(data_dir) else None
    if found is None and required:
        raise ToolError(f"{data_dir} holds no ringlog cluster (no cluster id in its "
                        f"{dd.META_PROPERTIES}); start one with: ringlog cluster start "
                        f"--data-dir {data_dir}")
    return found


def read_pages(cluster):
    """Every ``ProcessSnapshot`` of cluster id ``cluster`` (``cluster.stats.reader``)."""
    from cluster.stats import reader
    return reader.read_all(cluster)


def snapshots(data_dir, required=True):
    """The snapshots of the cluster of ``data_dir`` (``cluster_id``); [] when it has no
    cluster id and none is ``required``."""
    found = cluster_id(data_dir, required)
    return [] if found is None else read_pages(found)
