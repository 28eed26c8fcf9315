"""``python -m spark_bridge ARGS``: the same as ``ringlog spark-bridge ARGS``."""
from __future__ import annotations

import sys

from cluster.tools.cli import main

sys.exit(main(["spark-bridge", *sys.argv[1:]]))
