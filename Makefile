# ringlog: `make demo` and `make test` work on a fresh machine (they create .venv).
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo demo-logs test test-fast lint bench clean redis-server java kcat conformance

# setup.py and the .pyx files: the compiled record paths (issue 24), built in place by the
# editable install (optional: without a C compiler ringlog runs their pure-Python twins).
ACCEL_SOURCES := setup.py $(wildcard segments/record/*.pyx segments/record/*.pxd \
                   consumer_proc/*.pyx cluster/producer/*.pyx)

$(STAMP): setup.cfg pyproject.toml $(ACCEL_SOURCES)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,bench]'
	touch $(STAMP)

# The house rules: imports point down (import-linter contracts in setup.cfg), one import
# style and annotation policy, no unused code (ruff, pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check .

demo: java $(STAMP)
	$(PY) -m spark_bridge.demo

# Logs in, alerts out: writers, ringlog ship (killed twice), a Spark alerting job, checked.
demo-logs: java $(STAMP)
	$(PY) -m spark_bridge.logs_demo

# Spark (the demo's last stage) runs on a Java runtime, found as Spark finds it: JAVA_HOME's
# bin/java, else java on PATH. When there is none and we may (root, or sudo without a
# password) one is installed from Debian; otherwise the demo stops here, before it starts
# anything, with the command to run.
JAVA_PACKAGE := default-jre-headless
java:
	@if [ -n "$$JAVA_HOME" ]; then \
	  test -x "$$JAVA_HOME/bin/java" || { echo "JAVA_HOME=$$JAVA_HOME has no bin/java:" \
	    "point it at a Java runtime (17 or newer) or unset it"; exit 1; }; \
	elif ! command -v java >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then APT="apt-get"; \
	  elif sudo -n true 2>/dev/null; then APT="sudo apt-get"; fi; \
	  if [ -n "$$APT" ]; then \
	    $$APT install -y $(JAVA_PACKAGE) || { $$APT update && $$APT install -y $(JAVA_PACKAGE); } \
	      || { echo "could not install $(JAVA_PACKAGE), which Spark needs"; exit 1; }; \
	  else echo "Spark needs a Java runtime and there is none (no root or passwordless sudo" \
	    "to install it): sudo apt-get install -y $(JAVA_PACKAGE)"; exit 1; fi; fi

# The suite must leave no ringlog* object in /dev/shm: compare before and after, so
# objects of a cluster the user runs alongside are not blamed on the tests.
SHM_LIST := ls /dev/shm | grep -E '^(sem\.)?ringlog' | sort

# Bytecode for the test runs: the suite starts hundreds of Python processes (brokers, the
# gateway, tools, `python -m` clients), and each xdist worker imports every test module with
# its assertions rewritten; where bytecode is not written (PYTHONDONTWRITEBYTECODE, set in
# some sandboxes) each of them compiles ringlog from source again (0.3-0.4 s of CPU per
# broker start; collecting tests/segments and tests/replica_proc: 7.0 s of CPU without,
# 1.9 s with). Written under .cache/pycache (PYTHONPYCACHEPREFIX), never beside the sources.
PYCACHE := env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(CURDIR)/.cache/pycache

# Three workers (pytest-xdist; TEST_WORKERS=N to change), a test file to a worker so that a
# file's shared cluster starts once (the files that share the Spark session go to one worker
# together: one JVM for them all). On 2 cores the suite's tests wait (for brokers, for
# Spark, for timeouts they test) often enough that a third worker fills the cores: on
# 2026-11-29 pass one used 767 s of CPU in 471 s with three workers at load average 4-7
# (other developers' tests), where two had taken 817 s before this session's cuts.
# The files go out heaviest first (tests/conftest.py orders them by tests/file_costs.txt,
# which `pytest --record-file-costs` rewrites; --no-loadscope-reorder keeps xdist from
# re-sorting them by number of tests, which put the few-test Spark and e2e files last, run
# by one worker alone), so the workers end together.
# The second pytest line runs the codec and client tests again on the pure-Python record
# paths (RINGLOG_NO_ACCEL=1; the first ran the compiled ones when they are built), so both
# paths keep every behaviour those tests check (the ring's race tests too: its per-frame
# paths and wake-up check have a compiled twin, shm_ring/accel.py); the property tests draw
# a tenth of their examples there (the first pass searched in full; tests/segments/record/test_accel.py
# compares the two paths directly, in full).
TEST_WORKERS ?= 3
ACCEL_TESTS := tests/segments/record tests/consumer_proc/test_parsing.py \
	tests/consumer_proc/test_fetcher.py tests/cluster/producer/test_fast_path.py \
	tests/cluster/producer/test_send.py tests/cluster/producer/test_accumulator.py \
	tests/cluster/producer/test_idempotence.py tests/cluster/producer/test_transactions.py \
	tests/shm_ring/test_wakeup.py tests/shm_ring/test_connection.py \
	tests/shm_ring/test_outbound.py

test: lint redis-server kcat
	@$(SHM_LIST) > $(VENV)/shm.before || true
	$(PYCACHE) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests
	RINGLOG_NO_ACCEL=1 RINGLOG_QUICK_PROPERTIES=1 $(PYCACHE) $(PY) -m pytest -q \
	  -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(ACCEL_TESTS)
	@$(SHM_LIST) | comm -13 $(VENV)/shm.before - > $(VENV)/shm.leaked || true; \
	if [ -s $(VENV)/shm.leaked ]; then \
	  echo "shared-memory objects left behind by the tests:"; cat $(VENV)/shm.leaked; exit 1; fi

# `make test-fast`: the tests that start no process, no Spark and nothing slow (markers in
# setup.cfg [tool:pytest]), on two workers (pytest-xdist), the property tests drawing a tenth
# of their examples (tests/support/properties.py), for the edit-test loop. `make test` runs
# everything. Measured 2026-11-28 on this 2-core machine while seven other developers ran
# their tests (load average ~22): 276 s wall, 63 s of CPU (user + sys, both workers); the
# same set before (full property counts, also on two workers) took 402 s wall and 93 s of
# CPU at load ~20. On two idle cores CPU / 2 is ~32 s, plus the tests' real-time waits; not
# measured idle. 2026-11-29 with bytecode written (PYCACHE, above) and the group tests off
# their 3 s session waits, at load average 60-80: 504 s wall, 84 s of CPU (77 user + 7 sys;
# CPU time itself swells at such load), of which collecting the suite is ~14 s per worker;
# CPU / 2 on idle cores ~42 s plus the waits: under 60 s expected, not measured idle.
test-fast: $(STAMP)
	RINGLOG_QUICK_PROPERTIES=1 $(PYCACHE) $(PY) -m pytest -q -n 2 -m "not multiprocess and not spark and not slow" tests

# redis-server is one of the bench's peers (and the perf suite's tests compare against it):
# when it is missing and we may (root, or sudo without a password) it is installed from
# Debian; otherwise the suite skips Redis Streams and says how to install it.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || test -x /usr/bin/redis-server || { \
	  if [ "$$(id -u)" = 0 ]; then APT="apt-get"; \
	  elif sudo -n true 2>/dev/null; then APT="sudo apt-get"; fi; \
	  if [ -n "$$APT" ]; then \
	    $$APT install -y redis-server || { $$APT update && $$APT install -y redis-server; } \
	      || echo "could not install redis-server: the suite skips Redis Streams"; \
	  else echo "redis-server missing and no root or passwordless sudo: the suite skips" \
	    "Redis Streams (install it with: sudo apt-get install -y redis-server)"; fi; }

# kcat (librdkafka's command-line client) is one of the real Kafka clients the gateway's
# tests run (tests/cluster/gateway/test_kcat.py): installed from Debian as redis-server is;
# otherwise those tests skip and say so.
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then APT="apt-get"; \
	  elif sudo -n true 2>/dev/null; then APT="sudo apt-get"; fi; \
	  if [ -n "$$APT" ]; then \
	    $$APT install -y kcat || { $$APT update && $$APT install -y kcat; } \
	      || echo "could not install kcat: the suite skips the kcat tests"; \
	  else echo "kcat missing and no root or passwordless sudo: the suite skips the kcat" \
	    "tests (install it with: sudo apt-get install -y kcat)"; fi; }

# `make conformance`: librdkafka's own test suite (from Debian's source package, fetched
# and built once under .cache/conformance) against a 3-broker cluster through the Kafka
# gateway, one runner process per test number, three at once; prints passed / failed /
# skipped with each reason (tests/conformance) and fails when a test of
# tests/conformance/passing.txt did not pass (such a test is run again, once, alone:
# passing then, it is printed as flaky with the first run's failure; the output ends with
# the list's failures and their reasons). CONFORMANCE_ARGS adds options (--tests 0081,
# --parallel N, --log FILE, --cache DIR).
CONFORMANCE_CACHE ?= .cache/conformance
conformance: $(STAMP)
	$(PY) -m tests.conformance.librdkafka --cache $(CONFORMANCE_CACHE) --parallel 3 --retry \
	  --passing tests/conformance/passing.txt $(CONFORMANCE_ARGS)

# `make bench`: ringlog and its peers side by side (perf/suite; BENCH_ARGS=--quick for a
# one-minute subset).
bench: $(STAMP) redis-server
	$(PY) -m perf $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .cache/conformance .cache/pycache
	rm -f $(patsubst %.pyx,%.c,$(filter %.pyx,$(ACCEL_SOURCES))) \
	  $(wildcard $(patsubst %.pyx,%.cpython-*.so,$(filter %.pyx,$(ACCEL_SOURCES))))
