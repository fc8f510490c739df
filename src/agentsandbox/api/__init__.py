"""The agent-sandbox API: kinds, keys, hashes, conditions, equality and object builders.

Submodules, each small and dependency-free apart from the standard library:

- :mod:`~agentsandbox.api.kinds` — groups, versions, kinds, plurals;
- :mod:`~agentsandbox.api.keys` — every label and annotation key;
- :mod:`~agentsandbox.api.hashing` — FNV-1a name hashes and the Go-compatible pod-template hash;
- :mod:`~agentsandbox.api.conditions` — condition types/reasons/messages, ``SetStatusCondition``;
- :mod:`~agentsandbox.api.equality` — ``equality.Semantic`` for typed and untyped objects;
- :mod:`~agentsandbox.api.quantity` — resource quantities;
- :mod:`~agentsandbox.api.defaults` — ``apply_sandbox_secure_defaults``;
- :mod:`~agentsandbox.api.owners` — owner references and the adoption opt-in;
- :mod:`~agentsandbox.api.builders` — objects the controllers create.
"""

from agentsandbox.api.conditions import (
    find_condition,
    is_condition_true,
    is_sandbox_ready,
    make_condition,
    remove_status_condition,
    set_status_condition,
)
from agentsandbox.api.defaults import apply_sandbox_secure_defaults
from agentsandbox.api.equality import pod_spec_equal, semantic_equal, typed_equal
from agentsandbox.api.hashing import (
    fnv1a32,
    name_hash,
    pod_template_hash,
    sandbox_selector,
    template_ref_hash,
    warm_pool_selector,
)
from agentsandbox.api.kinds import (
    SANDBOX,
    SANDBOX_CLAIM,
    SANDBOX_TEMPLATE,
    SANDBOX_WARM_POOL,
    Kind,
)
from agentsandbox.api.owners import (
    AlreadyOwnedError,
    Ownership,
    controller_of,
    controller_reference,
    is_adoptable,
    ownership,
    with_controller_reference,
)
from agentsandbox.api.quantity import Quantity, parse_quantity, quantities_equal

__all__ = [
    "SANDBOX",
    "SANDBOX_CLAIM",
    "SANDBOX_TEMPLATE",
    "SANDBOX_WARM_POOL",
    "AlreadyOwnedError",
    "Kind",
    "Ownership",
    "Quantity",
    "apply_sandbox_secure_defaults",
    "controller_of",
    "controller_reference",
    "find_condition",
    "fnv1a32",
    "is_adoptable",
    "is_condition_true",
    "is_sandbox_ready",
    "make_condition",
    "name_hash",
    "ownership",
    "parse_quantity",
    "pod_spec_equal",
    "pod_template_hash",
    "quantities_equal",
    "remove_status_condition",
    "sandbox_selector",
    "semantic_equal",
    "set_status_condition",
    "template_ref_hash",
    "typed_equal",
    "warm_pool_selector",
    "with_controller_reference",
]
