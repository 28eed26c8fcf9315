"""The protocol tests (Kafka frames, cluster.protocol) need no fixture beyond pytest's own."""
