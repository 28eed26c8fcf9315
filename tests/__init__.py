"""ringlog's test suite: one folder per code package (segments, shm_ring, cluster, replica_proc,
consumer_proc, spark_bridge, perf), e2e for the public API end to end, and support for
what several folders share. Every folder is a package, so helpers import absolutely
(``from tests.support.bounds import BOUND``) and test files may share a basename."""
