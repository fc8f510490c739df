"""Upstream agent-sandbox's own e2e suite against our controller (``make conformance``): the test
binaries (build.sh, :mod:`.gotest`), the environment its framework expects (:mod:`.environment`),
the runner (run.py) and the table in docs/compatibility.md (:mod:`.report`)."""
