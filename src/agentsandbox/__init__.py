"""agentsandbox: the agent-sandbox Kubernetes controllers in Python."""

__version__ = "0.1.0"
