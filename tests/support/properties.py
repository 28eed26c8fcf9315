"""How many examples the property tests draw. Each names its full count, which ``make
test`` draws; ``make test-fast`` sets ``RINGLOG_QUICK_PROPERTIES=1`` and they draw a tenth
of it (at least 5), so the edit loop still runs every property, and the full suite keeps
the search."""
from __future__ import annotations

import os

QUICK = os.environ.get("RINGLOG_QUICK_PROPERTIES") == "1"


def examples(count):
    """``count`` examples, or a tenth of them (at least 5) in the quick run."""
    return max(5, count // 10) if QUICK else count
