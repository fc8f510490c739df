"""The SandboxTemplate controller: the template's NetworkPolicy."""

from agentsandbox.controllers.template.controller import setup

__all__ = ["setup"]
