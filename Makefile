# Two entry points for a fresh machine (Python >= 3.11 and Go >= 1.26 on PATH):
#   make demo   build the pinned tools, start a local control plane, run the operator on the samples
#   make test   build the pinned tools, then lint, type-check, unit and e2e tests on a real control plane
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint unit e2e bench bench-day2 tools venv clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

venv: $(BIN)/.installed

tools:
	tools/bootstrap

demo: venv tools
	$(BIN)/helm-operator dev demo $(ARGS)

lint: venv
	$(BIN)/ruff check helm_operator hooks tests bench
	$(BIN)/ruff format --check helm_operator hooks tests bench
	$(BIN)/mypy
	$(BIN)/mypy --strict hooks

unit: venv
	$(BIN)/pytest tests/unit -q

e2e: venv tools
	$(BIN)/pytest tests/e2e -v --durations=15

test: lint unit e2e

bench: venv tools
	$(BIN)/python -m bench.drift_latency $(ARGS)

bench-day2: venv tools
	$(BIN)/python -m bench.day2 $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
