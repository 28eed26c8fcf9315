"""The producer client: ``KafkaProducer`` (kafka_producer), the ``RecordAccumulator`` that
batches records per partition (accumulator, batch), the ``BufferPool`` its batches come from
(buffer_pool), the Sender thread that ships them (sender), the partitioner, and
kafka-python's producer metric names (producer_metrics).

Owned by the user's process; it talks to brokers only through ``cluster.client``.
"""
