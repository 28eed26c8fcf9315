"""The tools of the ``ringlog`` command line (see cluster/tools/cli.py), one module each."""
