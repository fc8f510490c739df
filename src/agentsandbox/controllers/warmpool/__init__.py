"""The SandboxWarmPool controller: keeps a pool of ready Sandboxes."""

from agentsandbox.controllers.warmpool.controller import setup

__all__ = ["setup"]
