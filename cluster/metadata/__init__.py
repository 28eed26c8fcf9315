"""What clients, the supervisor and brokers all read about a cluster.

- model: brokers, topics, partitions, leaders, replicas and epochs (``MetadataImage``);
- page / page_descriptor: the newest image in shared memory, for every process to read;
- data_dir: the data directory's layout and small files;
- broker_lock: broker liveness through flock(2);
- lock_holders: who holds a refused flock, from /proc/locks, for error messages.

Written by the controller (``replica_proc.controller``) and the supervisor; read by everyone.
"""
