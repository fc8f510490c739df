"""agentsandbox: the agent-sandbox Kubernetes controllers in Python."""

from importlib.metadata import PackageNotFoundError, version

try:
    # the one place the version is written is pyproject.toml; the installed metadata carries it
    # (its PEP 440 form: a SemVer pre-release 1.2.0-rc.1 is 1.2.0rc1 there, hack/semver.py)
    __version__ = version("agentsandbox")
except PackageNotFoundError:  # a bare source tree on PYTHONPATH, never installed
    __version__ = "0+unknown"
