"""The Sandbox controller: one pod (plus Service and claims) per Sandbox."""

from agentsandbox.controllers.sandbox.controller import setup

__all__ = ["setup"]
