"""How tests start processes of their own: ``CTX``, the fork context (the child inherits the
test's modules and objects, so a target may be any function of a test module)."""
from __future__ import annotations

import multiprocessing

CTX = multiprocessing.get_context("fork")
