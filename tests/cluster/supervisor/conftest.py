"""The supervisor tests keep their fixtures (``data_dir``, ``command``) in their one file; the
stand-in broker they run as a script is tests/cluster/supervisor/stand_in_broker.py."""
