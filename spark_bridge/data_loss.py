"""Records deleted before the query read them: fail, or warn and go on (``failOnDataLoss``).

Spark's Kafka source reports data loss through one function that raises when
``failOnDataLoss`` is true and logs a warning otherwise, each message followed by what the
user can do about it; this is that function. ringlog loses committed records only to
retention (``retention.ms`` / ``retention.bytes`` deleting old segments, which moves the
partition's log start offset) and to topic or partition deletion.
"""
from __future__ import annotations

import logging

log = logging.getLogger("spark_bridge")

INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_TRUE = (
    "Some data may have been lost because they are not available in ringlog any more; "
    "either the data was deleted by retention or the topic may have been deleted before "
    "all the data in the topic was processed. If you don't want your streaming query to "
    "fail on such cases, set the source option \"failOnDataLoss\" to \"false\".")
INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_FALSE = (
    "Some data may have been lost because they are not available in ringlog any more; "
    "either the data was deleted by retention or the topic may have been deleted before "
    "all the data in the topic was processed. If you want your streaming query to fail on "
    "such cases, set the source option \"failOnDataLoss\" to \"true\".")


class DataLossError(RuntimeError):
    """Records the query was to read are gone (``failOnDataLoss`` is true)."""


def report_data_loss(message, fail_on_data_loss):
    """Raise DataLossError with ``message`` when ``fail_on_data_loss``; else log it as a
    warning and return."""
    if fail_on_data_loss:
        raise DataLossError(f"{message}. {INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_TRUE}")
    log.warning("%s. %s", message, INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_FALSE)
