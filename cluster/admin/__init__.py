"""The admin client: ``KafkaAdminClient``, ``NewTopic``, ``NewPartitions``,
``ConfigResource`` (kafka_admin_client), over ``cluster.client``."""
