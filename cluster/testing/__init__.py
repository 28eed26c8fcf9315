"""ringlog for other projects' test suites: ``harness.TestCluster`` (a Cluster with the
conveniences a test wants) and ``pytest_plugin`` (the ``ringlog_cluster`` and
``ringlog_cluster_factory`` fixtures, registered through the ``pytest11`` entry point)."""
