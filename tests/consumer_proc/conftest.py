"""The consumer tests: the unit tests drive the fetcher and the offset lookups through the
fake client of tests/consumer_proc/fake_client.py (on the fake clock of tests/support/
clock.py); test_cluster.py keeps its module-scoped real cluster in its file."""
