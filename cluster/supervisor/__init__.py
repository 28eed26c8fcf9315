"""Running a cluster: the supervisor that starts, watches and stops the broker processes of
one data directory (supervisor), and ``Cluster``, the same from Python (cluster).

Brokers are separate processes (``python -m replica_proc``): nothing here imports them.
"""
