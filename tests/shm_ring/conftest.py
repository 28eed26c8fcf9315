"""The shm_ring tests use the root fixtures (tests/conftest.py): ``cluster_id``, whose objects
must be gone at the end, and ``spawn``, a forked peer killed by pid (tests that use it are
marked ``multiprocess``). Fixtures used by one file only (``listener``, ``owned_ring``) stay
in that file."""
