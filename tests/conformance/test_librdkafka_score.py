"""The conformance runner's reading of librdkafka's test-runner output (no process)."""
from __future__ import annotations

from tests.conformance.librdkafka import _merge, parse_summary, score, select

SUMMARY = """\
\x1b[36m[0081_admin                  /  0.600s] TEST FAILURE
\x1b[0m\x1b[31m### Test "0081_admin (do_test_CreateTopics:74: CreateTopics)" failed at \
0081-admin.c:232:do_test_CreateTopics() at Sat Nov 28 22:44:10 2026: ###
Expected NO_ERROR, not 40: INVALID_CONFIG
TEST 20261128224426 (bare, scenario default) SUMMARY
#==================================================================#
|\x1b[32m <MAIN>                                   |     PASSED |   7.026s \x1b[0m|
|\x1b[31m 0081_admin                               |     FAILED |   1.313s \x1b[0m|
|\x1b[32m 0083_cb_event                            |     PASSED |   6.313s \x1b[0m|
|\x1b[36m 0086_purge_local                         |    SKIPPED |   0.000s \x1b[0m|\
\x1b[36m Filtered due to negative test flags\x1b[0m
#==================================================================#
"""

TIMED_OUT = """\
|\x1b[33m 0113_cooperative_rebalance               |    RUNNING | 111.2s \x1b[0m|
### Test "0113_cooperative_rebalance (u_multiple_subscription_changes:2464)" failed at \
test.c:1217:check_test_timeouts() at Sat Nov 28 22:47:00 2026: ###
Test 0113_cooperative_rebalance (u_multiple_subscription_changes:2464) timed out (timeout \
set to 111 seconds)
"""


def test_summary_rows_with_the_first_failure_reason():
    rows = parse_summary(SUMMARY)
    assert rows["0081_admin"] == ("FAILED", "0081-admin.c:232:do_test_CreateTopics(): "
                                            "Expected NO_ERROR, not 40: INVALID_CONFIG")
    assert rows["0083_cb_event"] == ("PASSED", "")
    assert rows["0086_purge_local"] == ("SKIPPED", "Filtered due to negative test flags")


def test_a_timed_out_test_counts_as_failed_with_its_timeout():
    assert parse_summary(TIMED_OUT)["0113_cooperative_rebalance"] == (
        "FAILED", "timed out (timeout set to 111 seconds)")


def test_select_by_number_or_name():
    numbers = {"0001": ["0001_multiobj"], "0113": ["0113_cooperative_rebalance",
                                                   "0113_cooperative_rebalance_local"]}
    assert select(numbers, ["0113_cooperative_rebalance"]) == {"0113": numbers["0113"]}
    assert select(numbers, None, ["0001"]) == {"0113": numbers["0113"]}
    assert select(numbers) == numbers


def test_a_test_skipped_by_another_scenarios_runner_keeps_its_own_result():
    summary = {}
    _merge(summary, {"0045_subscribe_update_topic_remove": ("PASSED", "")})
    _merge(summary, {"0045_subscribe_update_topic_remove": ("SKIPPED", "scenario")})
    _merge(summary, {"0045_subscribe_update": ("SKIPPED", "scenario")})
    _merge(summary, {"0045_subscribe_update": ("FAILED", "why")})
    assert summary == {"0045_subscribe_update_topic_remove": ("PASSED", ""),
                       "0045_subscribe_update": ("FAILED", "why")}


def test_an_expected_failure_is_printed_apart_with_why_and_still_counts_as_failed():
    lines = score({"0092_mixed_msgver": ("FAILED", "AlterConfigs failed"),
                   "0081_admin": ("FAILED", "CreateAcls"),
                   "0001_multiobj": ("PASSED", ""),
                   "0086_purge_local": ("SKIPPED", "local")})
    assert lines[0] == "FAILED   0081_admin: CreateAcls"
    assert lines[1].startswith("EXPECTED 0092_mixed_msgver: AlterConfigs failed (fails "
                               "against Kafka too: ")
    assert "duplicate config keys" in lines[1]
    assert lines[-1] == ("librdkafka conformance: 1 passed, 2 failed (1 of them expected: "
                         "0092_mixed_msgver), 1 skipped")
