"""The reconcilers: Sandbox, SandboxTemplate, SandboxWarmPool, SandboxClaim."""
