"""The ``openai.policies`` section: per-principal limits, budgets, fair-share weight and class.

One entry per ``principal_ref``, with optional overrides per ``token_ref`` (a token of that
principal) and per model. An override states only the keys it changes; the rest come from the
principal's entry. A model override beats a token override, which beats the entry.

Each limit is counted over the scope that states it (``docs/governance.md``): the entry's
``requests_per_minute`` counts the principal's requests whose limit comes from the entry, a model
override's counts that principal's requests to that model. ``LimitScopes`` names, per key, the
scope a request is counted in. Plain Python, read by the limiter and the pool on every request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

PriorityClass = Literal["interactive", "batch"]
PRIORITY_CLASSES: tuple[PriorityClass, ...] = ("interactive", "batch")
LIMIT_KEYS = (
    "requests_per_minute",
    "tokens_per_minute",
    "max_concurrent",
    "tokens_per_day",
    "tokens_per_month",
)
SHARE_KEYS = ("weight", "priority_class")
SETTING_KEYS = (*LIMIT_KEYS, *SHARE_KEYS)
DEFAULT_WEIGHT = 1.0
DEFAULT_CLASS: PriorityClass = "interactive"


@dataclass(frozen=True, slots=True)
class Policy:
    """What applies to one request: None = no such limit."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None
    tokens_per_day: int | None = None
    tokens_per_month: int | None = None
    weight: float = DEFAULT_WEIGHT
    priority_class: PriorityClass = DEFAULT_CLASS

    @property
    def limited(self) -> bool:
        return any(getattr(self, key) is not None for key in LIMIT_KEYS)


@dataclass(frozen=True, slots=True)
class Settings:
    """The keys one entry or override states; None = not stated here."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None
    tokens_per_day: int | None = None
    tokens_per_month: int | None = None
    weight: float | None = None
    priority_class: PriorityClass | None = None


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    principal_ref: str
    settings: Settings
    token_overrides: Mapping[str, Settings]
    model_overrides: Mapping[str, Settings]


# Where a limit is counted: ("principal", P), ("token", T) or ("model", P + "\n" + M).
Scope = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Resolved:
    """A request's policy and, per limit key it sets, the scope that key is counted in."""

    policy: Policy
    scopes: Mapping[str, Scope]


UNLIMITED = Resolved(Policy(), MappingProxyType({}))


def resolve(
    entries: Mapping[str, PolicyEntry], principal_ref: str, token_ref: str, model: str
) -> Resolved:
    """The most specific setting of each key for a request (``None`` entries: unlimited)."""
    entry = entries.get(principal_ref)
    if entry is None:
        return UNLIMITED
    layers: list[tuple[Settings, Scope]] = [(entry.settings, ("principal", principal_ref))]
    if (token := entry.token_overrides.get(token_ref)) is not None:
        layers.append((token, ("token", token_ref)))
    if (per_model := entry.model_overrides.get(model)) is not None:
        layers.append((per_model, ("model", f"{principal_ref}\n{model}")))
    values: dict[str, Any] = {}
    scopes: dict[str, Scope] = {}
    for settings, scope in layers:
        for key in SETTING_KEYS:
            value = getattr(settings, key)
            if value is not None:
                values[key] = value
                if key in LIMIT_KEYS:
                    scopes[key] = scope
    return Resolved(Policy(**values), MappingProxyType(scopes))
