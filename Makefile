# ringlog: `make demo` and `make test` work on a fresh machine (they create .venv).
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m cluster.demo

test: $(STAMP)
	$(PY) -m pytest -q tests
	@leaks=$$(ls /dev/shm | grep -E '^(sem\.)?ringlog' || true); \
	if [ -n "$$leaks" ]; then echo "shared-memory objects left behind: $$leaks"; exit 1; fi

bench: $(STAMP)
	$(PY) -m perf

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
