# The two commands a newcomer needs: `make demo` and `make test`. Everything else is optional.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONTROLPLANE := hack/controlplane/build.sh
# upstream v1.0.1's own e2e test binaries (go test -c from hack/conformance/go.mod)
CONFORMANCE_BUILD := hack/conformance/build.sh
# The released PyPI clients, each in its own hash-locked venv (tests/integration/test_released_clients.py).
SDK046_VENV := .venv-sdk046
SDK108_VENV := .venv-sdk108
SDK046_STAMP := $(SDK046_VENV)/.installed
SDK108_STAMP := $(SDK108_VENV)/.installed
SDK_STAMPS := $(SDK046_STAMP) $(SDK108_STAMP)

.PHONY: help venv sdk-venvs controlplane conformance-build conformance cluster cluster-down test test-unit test-integration test-slow test-faults demo bench bench-runtime traces autoscale-eval lint fmt clean image image-check chart release-check

help:
	@echo "make demo          set everything up, start the local control plane and show the controller at work"
	@echo "make test          the test suite: unit + integration (a real local control plane) + one fault test"
	@echo "make test-faults   the whole fault suite (kills, restarts, network faults)"
	@echo "make conformance   upstream v1.0.1's own e2e tests (hack/conformance/required.txt) against our controller"
	@echo ".ci/run            everything CI runs: make lint, make test, make test-faults, make conformance, make release-check, make image-arm64-check, make image-index-check"
	@echo "make cluster       start the local control plane in the background (.cluster/kubeconfig)"
	@echo "make cluster-down  stop it"
	@echo "make lint          ruff + mypy"
	@echo "make image         the controller's OCI image, no container engine (dist/*-oci.tar, dist/image.digest)"
	@echo "make image-check   the image's root filesystem runs the controller (chroot, as root)"
	@echo "make image-arm64   the arm64 image, a second archive (dist/*-linux-arm64-oci.tar, dist/image-arm64.digest)"
	@echo "make image-arm64-check  it is AArch64 and runs through qemu-aarch64-static (chroot, as root)"
	@echo "make image-index   both images as one multi-platform index (dist/*-multiarch-oci.tar, dist/image-index.digest)"
	@echo "make image-index-check  the index lists both images' manifests, whole, and joins the same twice"
	@echo "make chart         dist/agent-sandbox-<version>.tgz (VERSION= and IMAGE= override version and image)"
	@echo "make release-check make release of this version and of a pre-release, each verified (hack/release_check.py)"
	@echo "make autoscale-eval the autoscaler's held-out scenarios in the simulator (SET=tuning: the tuning set)"

# requirements-dev.lock: the runtime dependencies, the [tracing] extra and the dev dependency
# group; the dev-only commands (agentsandbox-devcluster) come from hack/devtools/, a code-less
# distribution for this venv only (the runtime wheel leaves their modules out).
$(STAMP): pyproject.toml requirements-dev.lock hack/devtools/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --require-hashes -r requirements-dev.lock
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m pip install -q --no-deps --no-build-isolation ./hack/devtools
	@touch $@

venv: $(STAMP)

# Regenerate requirements-dev.lock after a change of pyproject.toml's dependencies (keeps every
# other pin; UPGRADE=1 moves all to the newest). uv, pinned, in a venv of its own.
UV_VERSION := 0.13.9
UV := build/uv/bin/uv
$(UV):
	$(PYTHON) -m venv build/uv
	build/uv/bin/python -m pip install -q uv==$(UV_VERSION)

.PHONY: lock
lock: $(UV)
	$(UV) pip compile pyproject.toml --extra tracing --group dev --python-version 3.11 --generate-hashes --no-strip-extras $(if $(UPGRADE),--upgrade) -o requirements-dev.lock

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

# Built (cold: go test -c of two packages) or found in the build cache, keyed by the pinned
# module and the inputs' hash; make test needs it for its TestSimpleSandbox smoke test.
conformance-build:
	@$(CONFORMANCE_BUILD) >/dev/null

# Upstream's e2e tests of hack/conformance/required.txt, each in its own process, against our
# controller on a private control plane (docs/compatibility.md, "Upstream's e2e suite"). Fails
# when one is missing, skipped or failing. The JSON goes to build/conformance/results.json;
# CONFORMANCE_OUT=hack/conformance/results.json writes the committed one (then run
# `python hack/gen_compat.py`).
CONFORMANCE_OUT ?= build/conformance/results.json
conformance: venv controlplane conformance-build
	$(PY) hack/conformance/run.py --out $(CONFORMANCE_OUT)

cluster: venv controlplane
	$(PY) -m agentsandbox.cli.devcluster up

cluster-down: venv
	$(PY) -m agentsandbox.cli.devcluster down

# pytest exits 5 when it selects no test: every target below selects some, so 5 fails it (and
# .ci/run says so)
PYTEST := $(PY) -m pytest

# The test suite: unit + integration (the slow ones too), but for the fault suite only its
# `smoke` test (a private control plane, kube-apiserver killed mid-fill). One session, one
# control plane shared by every integration test.
# Branch coverage: the unit tests' per package, checked against the committed floors
# (hack/coverage_floors.json). COVERAGE=all (set by .ci/run) measures the integration tests too,
# the controller processes they start included, and prints the whole suite's table.
COVERAGE ?= unit
COV_ALL := $(if $(filter all,$(COVERAGE)),--cov --cov-append --cov-report=)

test: venv sdk-venvs controlplane conformance-build
	rm -f .coverage .coverage.*
	$(PYTEST) tests/unit --cov --cov-report=
	$(PY) hack/coverage_report.py
	$(PYTEST) tests/integration tests/faults -m "not faults or smoke" --durations=15 $(COV_ALL)
	$(if $(COV_ALL),$(PY) hack/coverage_report.py --no-floors)

test-unit: venv
	$(PYTEST) tests/unit

test-integration: venv sdk-venvs controlplane conformance-build
	$(PYTEST) tests/integration -m "not faults"

# The fault suite (docs/reliability.md): every test marked `faults`: tests/faults and the claim
# bursts' kill -9 and split brain (tests/integration/test_claims.py), on one session control
# plane (tests/conftest.py) plus the API-fault module's private one.
test-faults: venv controlplane conformance-build
	$(PYTEST) tests/faults tests/integration -m faults

# Only the tests marked `slow` (over 30 s each; make test runs them too).
test-slow: venv controlplane
	$(PYTEST) tests/unit tests/integration -m "slow and not faults"

# an hour of steady load on two replicas (docs/reliability.md); DURATION=120s for a short run
DURATION ?= 1h
.PHONY: soak
soak: venv controlplane
	$(PY) bench/soak.py --duration $(DURATION)

demo: venv controlplane
	$(PY) -m agentsandbox.cli.demo

bench: venv controlplane
	$(PY) bench/run.py $(if $(SCENARIO),--scenario $(SCENARIO))

bench-runtime: venv controlplane
	$(PY) bench/runtime.py

# The autoscaler's evaluation (docs/autoscaling.md, "How the autoscaler is evaluated"): the arrival
# traces of bench/autoscale/traces.toml as CSV in build/traces/ (not committed), then every
# scenario of a set replayed through the simulator for both refill distributions; the JSON goes to
# build/autoscale-eval/<set>.json (not committed). Not part of `make test`.
SET ?= evaluation
AUTOSCALE_JOBS ?= 2
traces: venv
	$(PY) bench/autoscale/make_traces.py --out build/traces

autoscale-eval: traces
	$(PY) bench/autoscale/evaluate.py --set $(SET) --jobs $(AUTOSCALE_JOBS) --out build/autoscale-eval --traces-dir build/traces

# The release (docs/deploy.md, "Releases"): writes dist/ and commits nothing. The version is
# pyproject.toml's, as SemVer (hack/semver.py); VERSION= sets another SemVer 2 version for one
# build (the wheel takes its PEP 440 form). IMAGE= sets the image repository of install.yaml.
# Two runs give the same bytes (SOURCE_DATE_EPOCH: the last commit's time).
VERSION ?= $(shell $(PYTHON) hack/semver.py)
IMAGE ?=
# where release, image and chart write (release-check sets it per version)
DIST ?= dist
# The image and chart targets plug in here: each writes its artifact into dist/ (the image also
# dist/image.digest, "sha256:<hex>", which install.yaml then pins) before hack/release.py writes
# the Python distributions, install.yaml and RELEASE.md and sums all of dist/ into SHA256SUMS.
RELEASE_PARTS := chart image
.PHONY: release
release: venv $(RELEASE_PARTS)
	$(PY) hack/release.py --dist "$(DIST)" --version "$(VERSION)" $(if $(IMAGE),--image "$(IMAGE)")

# make release of $(VERSION) and, unless it is one, of its pre-release -rc.1, each into
# build/release-check/<version>/, verified by hack/release_check.py (sums, the image pinned by the
# archive's digest, chart and wheel versions, RELEASE.md); the first image is built twice, to
# compare digests, and pushed with crane (hack/crane/build.sh) to a registry on 127.0.0.1, where
# install.yaml's pinned reference must resolve (tests/registry_push/). Then the first release's
# artifacts themselves, on the local control plane (RELEASE_DIST): install.yaml in a server-side
# dry run, the packaged chart rendered and upgraded from upstream's chart and back, the wheel in a
# clean venv and its controller to /readyz, the image's root filesystem running the controller
# (as root) (tests/release_artifacts/, test_wheel.py, test_helm_upstream.py). dist/ is not touched.
# About 3 min warm (measured 175 s; the artifacts' tests about 75 s of it).
RELEASE_CHECK_VERSIONS ?= $(VERSION) $(if $(findstring -,$(VERSION)),,$(VERSION)-rc.1)
RELEASE_ARTIFACT_TESTS := tests/registry_push tests/release_artifacts \
	tests/integration/test_wheel.py tests/integration/test_helm_upstream.py
release-check: venv controlplane
	rm -rf build/release-check
	@rebuild=--rebuild-image; for v in $(RELEASE_CHECK_VERSIONS); do \
	  $(MAKE) --no-print-directory release VERSION=$$v DIST=build/release-check/$$v \
	    IMAGE_WORK=build/release-check/work-$$v || exit 1; \
	  $(PY) hack/release_check.py --dist build/release-check/$$v --version $$v $$rebuild || exit 1; \
	  rebuild=; \
	done
	CRANE=$$(hack/crane/build.sh | tail -n 1) RELEASE_DIST=build/release-check/$(firstword $(RELEASE_CHECK_VERSIONS)) \
	  VERSION=$(firstword $(RELEASE_CHECK_VERSIONS)) $(PYTEST) $(RELEASE_ARTIFACT_TESTS) --durations=10

# The controller's image without a container engine (hack/image/build.py): Debian bookworm packages
# of hack/image/debs.lock (apt-get download) and the wheels of hack/image/runtime.lock, cached under
# ~/.cache/agentsandbox/image/, unpacked into a root filesystem and written as an OCI image layout:
# dist/agent-sandbox-controller-<version>-oci.tar and dist/image.digest (the manifest's digest).
# The version is pyproject.toml's; VERSION= overrides it. Rebuilt only when an input changed.
# IMAGE_REPORT=bench/results/image.json rewrites the committed size report.
IMAGE_VERSION := $(or $(VERSION),$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml))
IMAGE_OCI := $(DIST)/agent-sandbox-controller-$(IMAGE_VERSION)-oci.tar
IMAGE_INPUTS := pyproject.toml README.md $(wildcard hack/image/*.py hack/image/*.lock) \
	$(shell find src -type f -not -name '*.pyc')
IMAGE_REPORT ?=
# the build's work directory (root filesystem, layer, report); release-check uses its own
IMAGE_WORK ?= build/image
$(IMAGE_OCI): $(IMAGE_INPUTS) | $(STAMP)
	VERSION=$(IMAGE_VERSION) $(PY) hack/image/build.py --dist $(DIST) --work $(IMAGE_WORK) --digest-copy $(IMAGE_WORK)/digest-$(IMAGE_VERSION) >/dev/null

image: $(IMAGE_OCI)
	@cp $(IMAGE_WORK)/digest-$(IMAGE_VERSION) $(DIST)/image.digest
	$(if $(IMAGE_REPORT),cp $(IMAGE_WORK)/report.json $(IMAGE_REPORT))
	@echo "$(IMAGE_OCI) $$(cat $(DIST)/image.digest)"

# As root: the image's root filesystem, unpacked from the archive, runs the controller under
# chroot as UID 65532, read-only, against a private local control plane; a second build from the
# same inputs gives the same digest (tests/image/).
image-check: image controlplane
	VERSION=$(IMAGE_VERSION) $(PYTEST) tests/image/test_image.py

# The arm64 image (docs/deploy.md, "The image"): the same build from hack/image/debs-arm64.lock
# (apt-get download through a private arm64 apt state under the cache) and runtime-arm64.lock
# (manylinux aarch64 wheels), written as a second archive,
# dist/agent-sandbox-controller-<version>-linux-arm64-oci.tar, and dist/image-arm64.digest.
# IMAGE_REPORT=bench/results/image-arm64.json rewrites its size report.
IMAGE_OCI_ARM64 := $(DIST)/agent-sandbox-controller-$(IMAGE_VERSION)-linux-arm64-oci.tar
IMAGE_WORK_ARM64 ?= build/image-arm64
$(IMAGE_OCI_ARM64): $(IMAGE_INPUTS) | $(STAMP)
	VERSION=$(IMAGE_VERSION) $(PY) hack/image/build.py --arch arm64 --dist $(DIST) --work $(IMAGE_WORK_ARM64) --digest-copy $(IMAGE_WORK_ARM64)/digest-$(IMAGE_VERSION) >/dev/null

.PHONY: image-arm64 image-arm64-check
image-arm64: $(IMAGE_OCI_ARM64)
	@cp $(IMAGE_WORK_ARM64)/digest-$(IMAGE_VERSION) $(DIST)/image-arm64.digest
	$(if $(IMAGE_REPORT),cp $(IMAGE_WORK_ARM64)/report.json $(IMAGE_REPORT))
	@echo "$(IMAGE_OCI_ARM64) $$(cat $(DIST)/image-arm64.digest)"

# As root: the arm64 image's binaries are AArch64, its controller prints --version under chroot
# as 65532 through qemu-aarch64-static (Debian's qemu-user-static, locked in hack/image/qemu.lock,
# unpacked into the cache: nothing is installed on the host), and a second build gives the same
# digest (tests/image/test_image_arm64.py).
image-arm64-check: image-arm64 controlplane
	QEMU_AARCH64=$$($(PY) hack/image/qemu.py) VERSION=$(IMAGE_VERSION) $(PYTEST) tests/image/test_image_arm64.py

# One multi-platform image (docs/deploy.md, "Architectures"): the two archives above joined by
# hack/image/index.py into one OCI image layout whose index.json names an image index of both
# manifests (linux/amd64, then linux/arm64 variant v8; their digests unchanged, each blob once):
# dist/agent-sandbox-controller-<version>-multiarch-oci.tar and dist/image-index.digest (the
# index's digest). Not part of make release; install.yaml still pins the amd64 digest.
IMAGE_OCI_INDEX := $(DIST)/agent-sandbox-controller-$(IMAGE_VERSION)-multiarch-oci.tar
.PHONY: image-index image-index-check
image-index: image image-arm64
	$(PY) hack/image/index.py --out $(IMAGE_OCI_INDEX) --digest $(DIST)/image-index.digest \
	  amd64=$(IMAGE_OCI) arm64=$(IMAGE_OCI_ARM64) >/dev/null
	@echo "$(IMAGE_OCI_INDEX) $$(cat $(DIST)/image-index.digest)"

# The index of the real archives lists dist/image.digest and dist/image-arm64.digest with their
# platforms, holds every blob they name, and a second join gives the same bytes
# (tests/image/test_image_index.py; no root, a few seconds after the builds).
image-index-check: image-index
	VERSION=$(IMAGE_VERSION) $(PYTEST) tests/image/test_image_index.py

# ruff on every Python file of the repository (src, tests, bench, hack, and any to come), mypy --strict
# The Helm chart, packaged: version and appVersion from pyproject.toml unless VERSION= is given;
# IMAGE= sets the image repository in its values.yaml.
chart:
	@hack/package_chart.sh "$(VERSION)" "$(IMAGE)" "$(DIST)"

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

fmt: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean: cluster-down
	rm -rf $(VENV) $(SDK046_VENV) $(SDK108_VENV) .cluster
	rm -rf .wheelhouse dist build/uv
