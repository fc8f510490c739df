"""The agent-sandbox API package: kinds, keys, hashes, conditions, equality and defaults.

Its modules (import each name from the module that defines it; this package re-exports nothing):

- :mod:`~agentsandbox.api.kinds` — groups, versions, kinds, plurals;
- :mod:`~agentsandbox.api.resources` — the REST resources of our kinds, for the runtime's client
  and informers (the one module that imports from :mod:`agentsandbox.kube`: its ``Resource``);
- :mod:`~agentsandbox.api.keys` — every label and annotation key;
- :mod:`~agentsandbox.api.hashing` — FNV-1a name hashes and the Go-compatible pod-template hash;
- :mod:`~agentsandbox.api.gojson` — Go ``encoding/json`` output of typed structs (the hashes'
  input), from the exported Go layout in ``gostructs.json``;
- :mod:`~agentsandbox.api.conditions` — condition types/reasons/messages, ``SetStatusCondition``;
- :mod:`~agentsandbox.api.equality` — ``equality.Semantic`` for typed and untyped objects;
- :mod:`~agentsandbox.api.quantity` — resource quantities;
- :mod:`~agentsandbox.api.defaults` — ``apply_sandbox_secure_defaults``;
- :mod:`~agentsandbox.api.owners` — owner references and the adoption opt-in;
- :mod:`~agentsandbox.api.timefmt` — timestamps as Kubernetes and Go write them.

The others use the standard library and each other only.
"""
