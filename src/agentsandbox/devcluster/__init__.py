"""The local control plane used by tests, benchmarks, the demo and ``make cluster``.

Its modules: :mod:`.cluster` (``DevCluster``: set-up, start, stop, admin access),
:mod:`.process` (each component's process), :mod:`.certs` (the PKI), :mod:`.binaries` (where the
built binaries are) and :mod:`.standin` (the stand-in sandbox runtime). The package imports
nothing from the rest of ``agentsandbox``.
"""
