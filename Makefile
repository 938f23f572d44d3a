# Two entry points for a fresh machine (Python >= 3.11 and Go >= 1.26 on PATH):
#   make demo   build the pinned tools, start a local control plane, run the operator on the samples
#   make test   build the pinned tools, then lint, type-check, unit and e2e tests on a real control plane,
#               and the benchmark harness in quick mode
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint unit e2e bench bench-quick bench-drift bench-day2 bench-day2-real tools venv clean rbac image

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
	$(BIN)/ruff check helm_operator hooks tests bench
	$(BIN)/ruff format --check helm_operator hooks tests bench
	$(BIN)/mypy
	$(BIN)/mypy --strict hooks

unit: venv
	$(BIN)/pytest tests/unit -q

e2e: venv tools
	$(BIN)/pytest tests/e2e -v --durations=15

# Three parts side by side, each on control planes of its own, started half a minute apart (two
# control planes starting at the same moment on a small machine both miss their deadlines): the
# e2e suite on KWOK's fake nodes, in two processes that take whole test files as they free up (most
# of its time is waiting on schedules, windows and rollouts, not on the CPU), the first at once and
# the second a minute later (tests/e2e/conftest.py); the real-node suite (tests/e2e/test_real_*.py:
# real PostgreSQL, etcd and the operator's image, mostly waiting on real processes) after half a
# minute; and the benchmark's quick mode, a smoke test of its harness (no timing assertions), after
# a minute and a half. The other two's output follows.
REAL_E2E := $(wildcard tests/e2e/test_real_*.py)
test: lint unit tools
	@mkdir -p .work
	@(sleep 30; exec $(BIN)/pytest $(REAL_E2E) -v --durations=10) > .work/e2e-real.log 2>&1 & real=$$!; \
	(sleep 90; exec $(BIN)/python -m bench --quick --drift-timeout 10) > .work/bench-quick.log 2>&1 & bench=$$!; \
	$(BIN)/pytest tests/e2e -v --durations=15 -n 2 --dist loadfile $(addprefix --ignore=,$(REAL_E2E)); e2e=$$?; \
	wait $$real; realrc=$$?; \
	echo "--- the real-node e2e suite (exit $$realrc), its last lines (all: .work/e2e-real.log):"; \
	tail -n 80 .work/e2e-real.log; \
	wait $$bench; quick=$$?; \
	echo "--- bench --quick (exit $$quick), its last lines (all: .work/bench-quick.log):"; \
	tail -n 60 .work/bench-quick.log; \
	test $$e2e -eq 0 && test $$realrc -eq 0 && test $$quick -eq 0

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

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
