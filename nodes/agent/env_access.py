"""Which environment variables the Edge's config may make this Node read (and send upstream).

An adapter's ``api_key_env`` names a variable whose value goes to its ``base_url`` as a bearer
key, and both come from the Edge. So the Node decides what it reads: names ending in ``_API_KEY``
that do not start with ``IOP_``, plus the names its operator allows (``--allow-env`` /
``IOP_NODE_ALLOWED_ENV``); never ``IOP_NODE_TOKEN``, nor any variable holding the node's token.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from nodes.wire import NodeSpec

TOKEN_ENV = "IOP_NODE_TOKEN"
ALLOWED_ENV = "IOP_NODE_ALLOWED_ENV"  # comma-separated names, added to --allow-env
DEFAULT_SUFFIX = "_API_KEY"
RESERVED_PREFIX = "IOP_"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class EnvAccess:
    """The rule, with the environment it reads and the node token it protects."""

    allowed: frozenset[str] = frozenset()
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)
    token: str = field(default="", repr=False)

    def permits(self, name: str) -> bool:
        if name == TOKEN_ENV or (self.token and self.environ.get(name) == self.token):
            return False
        if name in self.allowed:
            return True
        return name.endswith(DEFAULT_SUFFIX) and not name.startswith(RESERVED_PREFIX)

    def problems(self, spec: NodeSpec) -> list[str]:
        """One problem per adapter naming a variable this Node does not read, by path only: the
        name may be a pasted secret, and the value never leaves the Node."""
        return [
            f"node.adapters[{adapter.id}].api_key_env: this variable is not allowed on this "
            f"Node (its operator allows it with --allow-env or {ALLOWED_ENV})"
            for adapter in spec.adapters
            if adapter.api_key_env is not None and not self.permits(adapter.api_key_env)
        ]

    def view(self) -> Mapping[str, str]:
        """The environment as adapters may see it: the permitted names only."""
        return {name: value for name, value in self.environ.items() if self.permits(name)}


def allowed_names(flags: Iterable[str], environ: Mapping[str, str]) -> frozenset[str]:
    """The names ``--allow-env`` and ``IOP_NODE_ALLOWED_ENV`` allow; ``ValueError`` naming a
    bad one (a name is not a secret: the operator typed it on this machine)."""
    listed = [*flags, *environ.get(ALLOWED_ENV, "").split(",")]
    names = frozenset(name.strip() for name in listed if name.strip())
    for name in sorted(names):
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an environment variable name")
        if name == TOKEN_ENV:
            raise ValueError(f"{TOKEN_ENV} holds the node token and is never sent upstream")
    return names
