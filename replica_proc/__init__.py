"""The broker process (``python -m replica_proc``): one per broker id, started by the
supervisor (``cluster.supervisor``).

- broker: start-up, the request loop, shutdown; channel: one client connection as the loop
  sees it;
- request_handler and one ``*_handler`` module per API family (produce, fetch, list offsets,
  metadata, admin), delayed_fetch (the fetch purgatory), responses (kio response bodies);
- replica_manager and partition: the replicas this broker hosts, kept in step with the
  published metadata (broker_metadata); log_manager: retention, flushes and checkpoints;
- controller/: the controller and its metadata log, run by the broker that holds
  ``controller.lock``; controller_channel: the broker's connection to it (forwarded
  CreateTopics, AlterPartition); alter_partition_manager: a leader's ISR changes sent to
  it, alter_partition_handler: the controller's answer;

Single-threaded: the request loop owns every log and replica. It builds on ``segments``,
``shm_ring`` and ``cluster``'s lower rooms (protocol, config, metadata, errors), never on
client code.
"""
