"""The conformance runner's reading of librdkafka's test-runner output (no process but a
shell script standing in for the test-runner)."""
from __future__ import annotations

import os
import stat

from tests.conformance.librdkafka import (
    _merge,
    _unfinished_reason,
    client_warnings,
    closing_lines,
    parse_summary,
    regressions,
    retry_alone,
    run_one,
    score,
    select,
)

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
    assert rows["0081_admin"] == ("FAILED", "[do_test_CreateTopics:74: CreateTopics] "
                                            "0081-admin.c:232:do_test_CreateTopics(): "
                                            "Expected NO_ERROR, not 40: INVALID_CONFIG")
    assert rows["0083_cb_event"] == ("PASSED", "")
    assert rows["0086_purge_local"] == ("SKIPPED", "Filtered due to negative test flags")


def test_a_timed_out_test_counts_as_failed_with_its_timeout():
    assert parse_summary(TIMED_OUT)["0113_cooperative_rebalance"] == (
        "FAILED", "timed out in sub-test u_multiple_subscription_changes:2464 (timeout set "
                  "to 111 seconds)")


# a runner that aborted after a failure in a sub-test: no summary table
ABORTED = """\x1b[36m[0103_transactions           /  0.000s] [ do_test_misuse_txn:529 ]
[0103_transactions           /  3.084s] [ do_test_misuse_txn:529: PASS (3.08s) ]
[0103_transactions           /  3.084s] [ do_test_basic_producer_txn:129: without compression ]
[0103_transactions           /  9.000s] TEST FAILURE
\x1b[31m### Test "0103_transactions (do_test_basic_producer_txn:129: without compression)" \
failed at test.c:3090:test_consumer_poll_no_msgs() at Sun Nov 29 03:00:00 2026: ###
Abort transaction: Expected no messages, got 3
"""


def test_a_failure_without_a_summary_row_gets_its_sub_test_and_first_failure_line():
    reason = _unfinished_reason(ABORTED, "0103_transactions", None)
    assert reason == ("(runner ended before the test's end in sub-test "
                      "do_test_basic_producer_txn:129: without compression; see --log) "
                      "first failure: [do_test_basic_producer_txn:129: without compression] "
                      "test.c:3090:test_consumer_poll_no_msgs(): Abort transaction: Expected "
                      "no messages, got 3")
    stopped = _unfinished_reason(ABORTED.split("[0103_transactions           /  9")[0],
                                 "0103_transactions", "runner stopped after 600 s")
    assert stopped == ("(runner stopped after 600 s in sub-test "
                       "do_test_basic_producer_txn:129: without compression; see --log)")


def test_the_last_lines_name_each_regressed_test_with_its_reason():
    summary = {"0103_transactions": ("FAILED", "do_test_x:12: commit failed"),
               "0001_multiobj": ("PASSED", ""),
               "0044_partition_cnt": ("FAILED", "x" * 500)}
    required = ["0001_multiobj", "0044_partition_cnt", "0103_transactions", "0002_unkpart"]
    numbers = {"0001": [], "0044": [], "0103": [], "0113": []}
    regressed = regressions(summary, required, numbers)
    assert [name for name, _, _ in regressed] == ["0044_partition_cnt", "0103_transactions"]
    lines = closing_lines(regressed, "passing.txt")
    assert lines[0] == ("tests of passing.txt that passed before and do not now (2): "
                        "0044_partition_cnt, 0103_transactions")
    assert lines[1] == "  FAILED 0044_partition_cnt: " + "x" * 400 + " ..."
    assert lines[2] == "  FAILED 0103_transactions: do_test_x:12: commit failed"
    assert regressions({"0001_multiobj": ("PASSED", "")}, ["0001_multiobj"], numbers) == []
    assert closing_lines([], "passing.txt") == []
    missing = regressions({}, ["0113_cooperative_rebalance"], numbers)
    assert missing == [("0113_cooperative_rebalance", "MISSING", "no result: see --log")]


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
    # skips first, failures last: CI shows the end of the output
    assert lines[0] == "SKIPPED  0086_purge_local: local"
    assert lines[1].startswith("EXPECTED 0092_mixed_msgver: AlterConfigs failed (fails "
                               "against Kafka too: ")
    assert "duplicate config keys" in lines[1]
    assert lines[2] == "FAILED   0081_admin: CreateAcls"
    assert lines[-1] == ("librdkafka conformance: 1 passed, 2 failed (1 of them expected: "
                         "0092_mixed_msgver), 1 skipped")


def test_a_test_run_again_alone_counts_as_flaky_only_if_that_passes():
    regressed = [("0103_transactions", "FAILED", "[do_test_x:12] commit failed"),
                 ("0044_partition_cnt", "FAILED", "timed out")]
    asked = []

    def rerun(numbers):
        asked.append(numbers)
        return {"0103_transactions": ("PASSED", ""),
                "0044_partition_cnt": ("FAILED", "timed out again")}

    flaky, failing = retry_alone(regressed, rerun)
    assert asked == [{"0103", "0044"}]
    assert flaky == [regressed[0]]
    assert failing == [("0044_partition_cnt", "FAILED",
                        "timed out | run again alone: FAILED timed out again")]
    lines = closing_lines(failing, "passing.txt", flaky)
    assert lines[0].startswith("FLAKY: 1 test(s) of passing.txt failed in the run and "
                               "passed on retry")
    assert lines[1] == ("  flaky: passed on retry: 0103_transactions; the run's failure: "
                        "FAILED [do_test_x:12] commit failed")
    assert lines[-1] == ("  FAILED 0044_partition_cnt: timed out | run again alone: FAILED "
                         "timed out again")


CLIENT_LOG = """\
%7|1795912788.100|SEND|0044_partition_cnt#producer-1| [thrd:main]: debug, not kept
%5|1795912788.678|REQTMOUT|0044_partition_cnt#producer-1| [thrd:b/0]: b/0: Timed out \
ProduceRequest in flight (after 19831ms, timeout #0)
%4|1795912788.679|REQTMOUT|0044_partition_cnt#producer-1| [thrd:b/0]: b/0: Timed out 316 \
in-flight, 0 retry-queued, 0 out-queue, 0 partially-sent requests
\x1b[31m%3|1795912788.679|FAIL|0044_partition_cnt#producer-1| [thrd:b/0]: b/0: 316 \
request(s) timed out: disconnect (after 21008ms in state UP)
%4|1795912788.700|COMMITFAIL|0049_consume_conn_close#consumer-2| [thrd:main]: other test
"""


def test_a_failed_tests_last_client_warnings_are_printed_under_it():
    said = client_warnings(CLIENT_LOG)
    assert said["0044_partition_cnt"] == [
        "REQTMOUT: b/0: Timed out 316 in-flight, 0 retry-queued, 0 out-queue, 0 "
        "partially-sent requests",
        "FAIL: b/0: 316 request(s) timed out: disconnect (after 21008ms in state UP)"]
    lines = closing_lines([("0044_partition_cnt", "FAILED", "test_error_cb(): timed out")],
                          "passing.txt", (), said)
    assert lines[1:] == ["  FAILED 0044_partition_cnt: test_error_cb(): timed out",
                         "    client: " + said["0044_partition_cnt"][0],
                         "    client: " + said["0044_partition_cnt"][1]]


def test_the_suite_runs_in_its_ci_mode_wherever_it_runs(tmp_path, monkeypatch):
    # CI services set CI; the runner sets it too, so a local run is CI's run
    monkeypatch.delenv("CI", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    runner = work / "test-runner"
    runner.write_text('#!/bin/sh\necho "| 0055_producer_latency | SKIPPED | 0.000s | '
                      'CI=$CI TESTS=$TESTS"\n')
    runner.chmod(runner.stat().st_mode | stat.S_IXUSR)
    rows, _ = run_one(os.fspath(work), "default", "0055", ["0055_producer_latency"], 30)
    assert rows == {"0055_producer_latency": ("SKIPPED", "CI=true TESTS=0055")}
