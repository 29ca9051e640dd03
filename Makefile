# fuselite: `make demo` and `make test` set up .venv when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench coverage op-coverage clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m fuselite.cli demo

test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile -q tests

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

bench: $(STAMP)
	$(PY) benchmarks/run.py --out docs/benchmarks.md

coverage: $(STAMP)
	$(PY) benchmarks/coverage.py --out docs/coverage.md

op-coverage: $(STAMP)
	$(PY) benchmarks/op_coverage.py --out docs/op-coverage.md

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
