# The two commands a newcomer needs: `make demo` and `make test`. Everything else is optional.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONTROLPLANE := hack/controlplane/build.sh
# The released PyPI clients, each in its own hash-locked venv (tests/integration/test_released_clients.py).
SDK046_VENV := .venv-sdk046
SDK108_VENV := .venv-sdk108
SDK046_STAMP := $(SDK046_VENV)/.installed
SDK108_STAMP := $(SDK108_VENV)/.installed
SDK_STAMPS := $(SDK046_STAMP) $(SDK108_STAMP)

.PHONY: help venv sdk-venvs controlplane cluster cluster-down test test-unit test-integration test-slow demo bench bench-runtime lint fmt clean

help:
	@echo "make demo          set everything up, start the local control plane and show the controller at work"
	@echo "make test          unit + integration tests against a real local control plane"
	@echo "make cluster       start the local control plane in the background (.cluster/kubeconfig)"
	@echo "make cluster-down  stop it"
	@echo "make lint          ruff + mypy"

$(STAMP): pyproject.toml requirements-dev.lock
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --require-hashes -r requirements-dev.lock
	$(PY) -m pip install -q --no-deps -e .
	@touch $@

venv: $(STAMP)

# The controller's runtime dependencies as wheels (hash-checked from requirements-dev.lock), so that
# tests/integration/test_wheel.py installs the built wheel into a clean virtualenv offline.
WHEELHOUSE_STAMP := .wheelhouse/.complete
$(WHEELHOUSE_STAMP): $(STAMP) hack/wheelhouse.py
	$(PY) hack/wheelhouse.py
	@touch $@

venv: $(WHEELHOUSE_STAMP)

$(SDK046_STAMP): clients/requirements-sdk046.lock
	@test -x $(SDK046_VENV)/bin/python || $(PYTHON) -m venv $(SDK046_VENV)
	$(SDK046_VENV)/bin/python -m pip install -q --require-hashes --no-deps -r clients/requirements-sdk046.lock
	@touch $@

$(SDK108_STAMP): clients/requirements-sdk108.lock
	@test -x $(SDK108_VENV)/bin/python || $(PYTHON) -m venv $(SDK108_VENV)
	$(SDK108_VENV)/bin/python -m pip install -q --require-hashes --no-deps -r clients/requirements-sdk108.lock
	@touch $@

sdk-venvs: $(SDK_STAMPS)

controlplane:
	@$(CONTROLPLANE) >/dev/null
	@hack/controlplane/build-helm.sh >/dev/null
	@hack/controlplane/upstream.sh >/dev/null

cluster: venv controlplane
	$(PY) -m agentsandbox.cli.devcluster up

cluster-down: venv
	$(PY) -m agentsandbox.cli.devcluster down

test: venv sdk-venvs controlplane
	$(PY) -m pytest tests/unit tests/integration -m "not slow"
	$(PY) -m pytest tests/faults/test_api.py::test_apiserver_restart_mid_fill

test-unit: venv
	$(PY) -m pytest tests/unit

test-integration: venv sdk-venvs controlplane
	$(PY) -m pytest tests/integration -m "not slow"

# the fault suite (docs/reliability.md): tests/faults plus the claim bursts' kill -9 and split brain
FAULT_CLAIM_TESTS := tests/integration/test_claims.py::test_100_claims_with_two_controller_processes_racing \
	tests/integration/test_claims.py::test_100_claims_survive_a_kill_9_mid_burst_and_a_restart
.PHONY: test-faults
test-faults: venv controlplane
	$(PY) -m pytest tests/faults $(FAULT_CLAIM_TESTS)

# an hour of steady load on two replicas (docs/reliability.md); DURATION=120s for a short run
DURATION ?= 1h
.PHONY: soak
soak: venv controlplane
	$(PY) bench/soak.py --duration $(DURATION)

test-slow: venv controlplane
	$(PY) -m pytest tests -m slow

demo: venv controlplane
	$(PY) -m agentsandbox.cli.demo

bench: venv controlplane
	$(PY) bench/run.py $(if $(SCENARIO),--scenario $(SCENARIO))

bench-runtime: venv controlplane
	$(PY) bench/runtime.py

lint: venv
	$(VENV)/bin/ruff check src tests bench hack
	$(VENV)/bin/ruff format --check src tests bench hack
	$(VENV)/bin/mypy

fmt: venv
	$(VENV)/bin/ruff format src tests
	$(VENV)/bin/ruff check --fix src tests

clean: cluster-down
	rm -rf $(VENV) $(SDK046_VENV) $(SDK108_VENV) .cluster
	rm -rf .wheelhouse
