"""The producer tests use ``fake_cluster`` (tests/cluster/conftest.py); ``producer_of`` differs
per file (settings for what each file tests), so it stays in each file. The fake clock is
tests/support/clock.py."""
