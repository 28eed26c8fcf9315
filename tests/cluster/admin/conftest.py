"""The admin client tests use ``fake_cluster`` (tests/conftest.py); ``admin_of`` is in
the one file that uses it."""
