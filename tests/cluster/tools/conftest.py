"""The tools tests run each tool against one real cluster per module: ``cluster =
tool_cluster(brokers)`` (tests/support/tools.py) makes that module-scoped fixture, and
``run_tool`` calls a tool as the CLI would."""
