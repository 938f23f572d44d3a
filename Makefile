# Two entry points for a fresh machine (Python >= 3.11 and Go >= 1.26 on PATH):
#   make demo   build the pinned tools, start a local control plane, run the operator on the samples
#   make test   build the pinned tools, then lint, type-check, unit and e2e tests on a real control plane,
#               and the benchmark harness in quick mode
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint unit docs e2e bench bench-quick bench-drift bench-day2 bench-day2-real bench-pg-ha tools venv clean rbac image

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

venv: $(BIN)/.installed

tools: venv
	tools/bootstrap

demo: venv tools
	$(BIN)/helm-operator dev demo $(ARGS)

lint: venv
	$(BIN)/ruff check helm_operator hooks tests bench tools/test-parts
	$(BIN)/ruff format --check helm_operator hooks tests bench tools/test-parts
	$(BIN)/mypy
	$(BIN)/mypy --strict hooks tools/test-parts

unit: venv
	$(BIN)/pytest tests/unit -q

# The tables in docs/ that mirror the code (conditions, metrics, watches.yaml fields, the CLI),
# rewritten from it; tests/unit/test_reference_docs.py fails while a page is out of date.
docs: venv
	$(BIN)/python -m helm_operator.dev.reference

e2e: venv tools
	$(BIN)/pytest tests/e2e -v --durations=15

# The e2e parts side by side, each on control planes of its own (clusters start one at a time on
# the machine by themselves): the e2e suite on KWOK's fake nodes in two processes that take whole
# test files, the real-node suite (tests/e2e/test_real_*.py: real PostgreSQL, etcd and the
# operator's image), and the benchmark's quick mode (a smoke test of its harness, at the lowest CPU
# priority). Whole outputs stay in .work/; the last lines name every failure (tools/test-parts).
test: lint unit tools
	$(BIN)/python tools/test-parts

# config/02-rbac.yaml from what the charts render and the hooks use (after changing either).
rbac: venv
	tools/bootstrap helm4
	eval "$$(tools/bootstrap --print-env)" && $(BIN)/helm-operator rbac --helm "$$HELM_OPERATOR_HELM" \
	  --watches-file watches.yaml --out config/02-rbac.yaml

image:
	docker build -t helm-operator:dev .

# Side by side: ours vs plain helm vs the Operator SDK Helm operator (bench/REPORT.md). The full run
# (N=100,500,1000) takes hours and wants a quiet machine; bench-quick (N=20) is a few-minute smoke test.
bench: venv tools
	$(BIN)/python -m bench $(ARGS)

bench-quick: venv tools
	$(BIN)/python -m bench --quick $(ARGS)

bench-drift: venv tools
	$(BIN)/python -m bench.drift_latency $(ARGS)

bench-day2: venv tools
	$(BIN)/python -m bench.day2 $(ARGS)

# Day-2 on the real node: PostgreSQL backup and restore of ≥100 MB, failover (Pod deleted,
# PostgreSQL stopped) and switchover windows; etcd snapshot and restore of ~100 MB
# (bench/results/day2-real.md; about 20 minutes, after waiting for another run's real node).
bench-day2-real: venv tools
	$(BIN)/python -m bench.day2_real $(ARGS)

# PostgreSQL high availability on the real node: per kind of primary failure (kill -9, SIGSTOP, Pod
# deleted, switchover), what the clients lose and wait (bench/results/pg-ha.md; about 30 minutes).
bench-pg-ha: venv tools
	$(BIN)/python -m bench.pg_ha $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
