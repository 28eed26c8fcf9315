"""The client tests use ``fake_cluster`` (tests/conftest.py); ``client_of`` is in the
one file that uses it."""
