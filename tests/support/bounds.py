"""The suite's wait bounds, in seconds: how long a single wait may take before the test
fails. No passing test comes near them; they only turn a hang into a failure."""
from __future__ import annotations

BOUND = 30.0
"""Seconds any single wait of a test may take before the test fails."""

IN_PROCESS_BOUND = 10.0
"""Waits on what runs in the test process only (fake brokers served by threads): shorter,
since nothing has to start."""

SPARK_QUERY_BOUND = 60.0
"""Spark's micro-batch queries in tests stop within this many seconds."""

SPARK_BRIDGE_BOUND = 150.0
"""Seconds a bridge may take to start Spark and get somewhere (Spark alone takes 10-40 s on
a loaded 2-core machine)."""

PERF_RUN_BOUND = 150
"""Seconds a ``python -m perf`` run of the perf suite's tests may take."""

DEMO_BOUND = 300
"""Seconds the small demo run (cluster stage and Spark stage) may take."""
