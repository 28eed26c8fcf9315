"""Fixtures of the producer tests: ``producer_of(cluster, **overrides)`` makes KafkaProducers
on a ``fake_cluster`` (tests/conftest.py) and closes them after the test. Settings:
its common ones for tests (acks=1, no idempotence, short backoffs and timeouts), then the
test module's ``PRODUCER_SETTINGS``, then the call's overrides. The fake clock is
tests/support/clock.py."""
from __future__ import annotations

import pytest

from cluster.producer.kafka_producer import KafkaProducer
from tests.support.bounds import IN_PROCESS_BOUND

COMMON_SETTINGS = dict(acks=1, enable_idempotence=False, retry_backoff_ms=5,
                       request_timeout_ms=2000, delivery_timeout_ms=8000, max_block_ms=5000,
                       ringlog_park_timeout_ms=10)


@pytest.fixture
def producer_of(request):
    made = []
    module_settings = getattr(request.module, "PRODUCER_SETTINGS", {})

    def make(cluster, **overrides):
        settings = dict(COMMON_SETTINGS, bootstrap_servers=cluster.data_dir,
                        **module_settings)
        settings.update(overrides)
        producer = KafkaProducer(**settings)
        made.append(producer)
        return producer
    yield make
    for producer in made:
        producer.close(timeout=IN_PROCESS_BOUND)
