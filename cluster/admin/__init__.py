"""The admin client: ``KafkaAdminClient``, ``NewTopic``, ``NewPartitions``
(kafka_admin_client), over ``cluster.client``."""
