"""The controller: the broker holding ``controller.lock`` owns the cluster's metadata.

- controller: topic create/delete, partition assignment, broker liveness, publication of the
  metadata page;
- controller_lock: the election, by generations of ``controller.lock``, and the takeover
  from a controller whose heartbeat stopped (a SIGSTOPped or hung controller);
- metadata_log: every change as a record on disk, replayed into an image at start-up;
- placement: Kafka's replica assignment and leader election.

Single writer: the controller broker's request loop.
"""
