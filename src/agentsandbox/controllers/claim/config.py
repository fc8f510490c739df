"""The claim controller's configuration file: the label domains a claim's
``additionalPodMetadata`` labels may use (docs/claims.md, "Which labels a claim may set").

The file is the ``allowed-label-domains`` key of the optional ConfigMap ``agent-sandbox-config``
in the controller's namespace, which the install mounts at /etc/sandbox-config/ (upstream
v1.0.1's place and format). It is read once, at start: a change takes effect when the
controller restarts.
"""

from __future__ import annotations

import re
from pathlib import Path

#: Where the mounted ConfigMap key is read.
LABEL_DOMAINS_FILE = Path("/etc/sandbox-config/allowed-label-domains")
#: The domains (each with its subdomains) when the file is missing or lists none.
DEFAULT_LABEL_DOMAINS: tuple[str, ...] = ("sandbox.users.io",)
_SEPARATORS = re.compile(r"[,\r\n]")


def parse_label_domains(text: str) -> tuple[str, ...]:
    """The domains ``text`` lists, separated by commas or line breaks, each stripped of blanks
    and lower-cased, in order, once each; :data:`DEFAULT_LABEL_DOMAINS` when it lists none."""
    domains = (entry.strip().lower() for entry in _SEPARATORS.split(text))
    return tuple(dict.fromkeys(d for d in domains if d)) or DEFAULT_LABEL_DOMAINS


def load_label_domains(path: Path = LABEL_DOMAINS_FILE) -> tuple[str, ...]:
    """The domains of the file at ``path``; :data:`DEFAULT_LABEL_DOMAINS` when there is no
    such file (no ConfigMap, or no such key in it). Any other read error is raised
    (:class:`OSError`, or :class:`UnicodeDecodeError` for a file that is not UTF-8)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return DEFAULT_LABEL_DOMAINS
    return parse_label_domains(text)


__all__ = [
    "DEFAULT_LABEL_DOMAINS",
    "LABEL_DOMAINS_FILE",
    "load_label_domains",
    "parse_label_domains",
]
