"""The SandboxWarmPoolAutoscaler controller: sizes a warm pool from its claims."""

from agentsandbox.controllers.autoscaler.controller import setup

__all__ = ["setup"]
