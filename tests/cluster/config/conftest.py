"""The config tests (cluster.config) need no fixture beyond pytest's own."""
