# ringlog: `make demo` and `make test` work on a fresh machine (they create .venv).
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo demo-logs test test-fast lint bench clean redis-server java

$(STAMP): setup.cfg pyproject.toml
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

test: lint redis-server
	@$(SHM_LIST) > $(VENV)/shm.before || true
	$(PY) -m pytest -q tests
	@$(SHM_LIST) | comm -13 $(VENV)/shm.before - > $(VENV)/shm.leaked || true; \
	if [ -s $(VENV)/shm.leaked ]; then \
	  echo "shared-memory objects left behind by the tests:"; cat $(VENV)/shm.leaked; exit 1; fi

# `make test-fast`: the tests that start no process, no Spark and nothing slow (markers in
# setup.cfg [tool:pytest]); seconds, for the edit-test loop. `make test` runs everything.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not multiprocess and not spark and not slow" tests

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

# `make bench`: ringlog and its peers side by side (perf/suite; BENCH_ARGS=--quick for a
# one-minute subset).
bench: $(STAMP) redis-server
	$(PY) -m perf $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
