"""Client networking shared by the producer, the consumer and the admin client: connections
to brokers over the rings, in-order responses (kafka_client), the client's metadata cache
(metadata), kafka-python's ``Future`` (future) and the windowed statistics of the clients'
``metrics()`` (sampled_stat).

Owned by one client at a time; it knows the protocol (``cluster.protocol``) and the metadata
page (``cluster.metadata``), never the brokers' internals.
"""
