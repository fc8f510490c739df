"""The Sandbox controller: one Pod (plus its PVCs and a headless Service) per Sandbox."""

from agentsandbox.controllers.sandbox.controller import setup

__all__ = ["setup"]
