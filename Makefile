# ringlog: `make demo` and `make test` work on a fresh machine (they create .venv).
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,bench]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m cluster.demo

# The suite must leave no ringlog* object in /dev/shm: compare before and after, so
# objects of a cluster the user runs alongside are not blamed on the tests.
SHM_LIST := ls /dev/shm | grep -E '^(sem\.)?ringlog' | sort

test: $(STAMP)
	@$(SHM_LIST) > $(VENV)/shm.before || true
	$(PY) -m pytest -q tests
	@$(SHM_LIST) | comm -13 $(VENV)/shm.before - > $(VENV)/shm.leaked || true; \
	if [ -s $(VENV)/shm.leaked ]; then \
	  echo "shared-memory objects left behind by the tests:"; cat $(VENV)/shm.leaked; exit 1; fi

bench: $(STAMP)
	$(PY) -m perf

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
