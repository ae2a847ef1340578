# The two commands of a fresh machine:  `make quickstart`  and  `make test`.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: setup quickstart test test-unit test-services lint bench

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -c constraints.txt -e '.[dev,dashboard,ray]'
	touch $@

quickstart: setup
	$(BIN)/ablate run quickstart --jobs 2  # the shipped study (ablate/studies/quickstart.yaml)
	$(BIN)/ablate report table1 --grid quickstart

test: setup
	VENV=$(VENV) scripts/test.sh $(ARGS)

# the tests that start no service (tests/unit and the docstrings' examples; PostgreSQL's cases and the slow
# end-to-end ones left out): a few minutes
test-unit: setup
	$(BIN)/python -m pytest -n 2 --dist loadgroup tests/unit ablate -m "not postgres and not slow" $(ARGS)

# the tests that start services: Slurm and Ray (tests/services), and every case on a PostgreSQL server
test-services: setup
	VENV=$(VENV) scripts/test.sh tests/services $(ARGS)
	VENV=$(VENV) scripts/test.sh tests/unit -m postgres $(ARGS)

lint: setup
	$(BIN)/ruff check ablate tests bench examples
	$(BIN)/mypy  # all of ablate, strict where [tool.mypy] says (pyproject.toml)
	$(BIN)/lint-imports  # the layers of docs/internals.md ([tool.importlinter] in pyproject.toml): no circles
