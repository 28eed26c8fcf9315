"""The broker process (``python -m replica_proc``): one per broker id, started by the
supervisor (``cluster.supervisor``).

- broker: start-up, the request loop, shutdown; channel: one client connection as the loop
  sees it;
- request_handler and one ``*_handler`` module per API family (produce, fetch, list offsets,
  metadata, admin), delayed_fetch (the fetch purgatory), responses (kio response bodies);
- replica_manager and partition: the replicas this broker hosts, kept in step with the
  published metadata (broker_metadata); log_manager: retention, flushes and checkpoints;
- inter_broker_channel: the one broker-to-broker channel (a request sent without waiting,
  its answer handed to a callback, a lost connection failing what is in flight), under the
  controller channel, the transaction marker sender and the follower fetcher;
- controller/: the controller and its metadata log, run by the broker that holds
  ``controller.lock``; controller_channel: the broker's channel to it (forwarded
  CreateTopics, AlterPartition, AllocateProducerIds); alter_partition_manager: a leader's
  ISR changes sent to it, alter_partition_handler: the controller's answer;
- replica_fetcher: the follower fetching from its leaders, one channel per leader;
  truncation: where a follower truncates before fetching from a new leader;
- group_coordinator/ and transaction_coordinator/: the two coordinators, each a state
  machine without I/O, its runtime in the broker and its request handlers (the
  transaction coordinator's marker sender goes through inter-broker channels);
  coordinator_common/: what both stand on (their internal topic, its partitioning, its
  log, the record field encodings).

Single-threaded: the request loop owns every log and replica. It builds on ``segments``,
``shm_ring`` and ``cluster``'s lower rooms (protocol, config, metadata, errors), never on
client code.
"""
