"""Per-process statistics: every ringlog process publishes its figures (memory, CPU, context
switches, GC, and its role's own counters) to a shared-memory stats page of its own, and
``ringlog top`` / ``metrics`` / ``profile`` read every page of a cluster without asking the
processes anything (a hung or dead process stays visible).

``snapshot``: what a reader gets for one process (the contract between the pages and the
tools); ``page_descriptor``: the page's binary layout and protocol; ``page``: create, write,
open, read one page; ``gc_monitor``: the collector's figures from ``gc.callbacks``;
``publisher``: the process's page and the thread that refreshes it (``process_stats``,
``RINGLOG_STATS=0`` turns it off); ``reader``: ``list_pages``, ``read_all``, ``reap_dead``
for the tools and the supervisor.
"""
