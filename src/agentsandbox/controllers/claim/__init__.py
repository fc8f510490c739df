"""The SandboxClaim controller: gives each claim one Sandbox, warm from a pool or cold."""

from agentsandbox.controllers.claim.controller import setup

__all__ = ["setup"]
