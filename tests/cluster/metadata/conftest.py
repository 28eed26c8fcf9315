"""The metadata tests (model, metadata page, data directory and broker lock): the page tests
keep their own ``cluster_id`` and ``page`` fixtures in their file; processes are forked with
tests/support/processes.py."""
