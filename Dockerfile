# syntax=docker/dockerfile:1
# The agent-sandbox-controller image: the wheel and its hash-locked runtime dependencies in a
# virtualenv on python:3.11-slim, run as a non-root user (UID/GID 65532, as the Deployment's
# securityContext). Build and push (docs/deploy.md):
#
#   docker build -t registry.example.com/agent-sandbox-controller:0.1.0 .
#   docker push registry.example.com/agent-sandbox-controller:0.1.0
#
# then install with `--set image.repository=registry.example.com/agent-sandbox-controller`.
# The recipe is the one tests/integration/test_wheel.py runs: `python -m build` makes the wheel,
# hack/wheelhouse.py downloads the runtime dependencies (hashes from requirements-dev.lock), and
# the wheel is installed from that wheelhouse with no index.

ARG PYTHON_IMAGE=python:3.11-slim

# ---- build: the wheel and the wheelhouse
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
COPY pyproject.toml requirements-dev.lock README.md ./
RUN python -m venv /build \
 && /build/bin/pip install -q --require-hashes -r requirements-dev.lock
COPY src ./src
COPY hack/wheelhouse.py ./hack/wheelhouse.py
RUN /build/bin/pip install -q --no-deps -e . \
 && /build/bin/python hack/wheelhouse.py \
 && /build/bin/python -m build --no-isolation --wheel --outdir /dist .

# ---- install: the wheel alone into /opt/venv, offline
FROM ${PYTHON_IMAGE} AS install
COPY --from=build /dist /dist
COPY --from=build /src/.wheelhouse /wheelhouse
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install -q --no-cache-dir --no-index --find-links /wheelhouse /dist/*.whl \
 && /opt/venv/bin/python -m pip uninstall -q -y pip setuptools

# ---- runtime
FROM ${PYTHON_IMAGE}
COPY --from=install /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/opt/venv/bin/agent-sandbox-controller"]
