"""The tools of the ``ringlog`` command line (see cluster/cli.py), one module each."""
