"""Per-process statistics: every ringlog process publishes its figures (memory, CPU, context
switches, GC, and its role's own counters) to a shared-memory stats page of its own, and
``ringlog top`` / ``metrics`` / ``profile`` read every page of a cluster without asking the
processes anything (a hung or dead process stays visible).

``snapshot``: what a reader gets for one process (the contract between the pages and the
tools). The page layout, the publisher and the reader live in the modules beside it.
"""
