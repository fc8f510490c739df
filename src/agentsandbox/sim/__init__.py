"""A discrete-event simulator of one SandboxWarmPool, static or autoscaled (no cluster).

``python -m agentsandbox.sim --help``; the model is in :mod:`.engine`, the traces in
:mod:`.traces`, the create -> Ready distributions in :mod:`.latency`, the static-size search in
:mod:`.compare`; ``docs/autoscaling.md`` has the numbers.
"""
