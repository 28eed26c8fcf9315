"""Fixtures of the Spark tests: ``spark``, one SparkSession for the whole test process
(starting one costs several seconds; ``spark_bridge.get_spark``: local[2], the ringlog source
registered). A test that asks for it starts a Spark JVM: mark it ``spark`` and
``multiprocess``. Helpers that are not fixtures are in tests/spark_bridge/helpers.py."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from spark_bridge import get_spark

    session = get_spark(app_name="ringlog-tests",
                        conf={"spark.sql.session.timeZone": "UTC"})
    yield session
    session.stop()
