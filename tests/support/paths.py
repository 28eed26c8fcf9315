"""Paths of the repository the tests need: ROOT (the checkout, where ``python -m`` finds the
packages and the demo runs) and SUPPORT (this folder, home of the scripts tests run)."""
from __future__ import annotations

import os

SUPPORT = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(SUPPORT)
ROOT = os.path.dirname(TESTS)
