"""The segments tests (RecordBatch codec, partition log, indexes, recovery, compaction, the
dump-log tool) share no fixture beyond tests/conftest.py; their helpers (batches built from
records, a log on the fake clock, a simulated crash) are in tests/segments/helpers.py and
the clock in tests/support/clock.py. Nothing here starts a process."""
