"""The `failover` and `passive_health` sections: how the run path copes with failing providers.

Both are optional, live, and left out of the canonical form while they hold their defaults, so a
config that does not use them keeps the revision it had before they existed.
"""

from __future__ import annotations

from typing import Any

from edge.config.fields import Fields
from edge.config.schema import Failover, PassiveHealth

FAILOVER_KEYS = ("max_attempts",)
PASSIVE_HEALTH_KEYS = ("failures", "window_s", "cooldown_s")
MAX_ATTEMPTS_LIMIT = 10
MAX_FAILURES = 1000
MAX_SECONDS = 3600
DEFAULT_FAILOVER = Failover()
DEFAULT_PASSIVE_HEALTH = PassiveHealth()


def load_failover(fields: Fields, raw: Any) -> Failover | None:
    data = fields.mapping(raw, "failover", FAILOVER_KEYS)
    if data is None:
        return None
    attempts = fields.integer(
        data,
        "max_attempts",
        "failover",
        default=DEFAULT_FAILOVER.max_attempts,
        minimum=1,
        maximum=MAX_ATTEMPTS_LIMIT,
    )
    return None if attempts is None else Failover(attempts)


def load_passive_health(fields: Fields, raw: Any) -> PassiveHealth | None:
    path = "passive_health"
    data = fields.mapping(raw, path, PASSIVE_HEALTH_KEYS)
    if data is None:
        return None
    defaults = DEFAULT_PASSIVE_HEALTH
    failures = fields.integer(
        data, "failures", path, default=defaults.failures, minimum=0, maximum=MAX_FAILURES
    )
    window = fields.number(
        data, "window_s", path, default=defaults.window_s, above=0, maximum=MAX_SECONDS
    )
    cooldown = fields.number(
        data, "cooldown_s", path, default=defaults.cooldown_s, above=0, maximum=MAX_SECONDS
    )
    if failures is None or window is None or cooldown is None:
        return None
    return PassiveHealth(failures, window, cooldown)


def failover_canonical(failover: Failover) -> dict[str, Any]:
    return {"max_attempts": failover.max_attempts}


def passive_health_canonical(passive: PassiveHealth) -> dict[str, Any]:
    return {
        "failures": passive.failures,
        "window_s": passive.window_s,
        "cooldown_s": passive.cooldown_s,
    }


def resilience_canonical(failover: Failover, passive: PassiveHealth) -> dict[str, Any]:
    """The sections of the canonical form that differ from their defaults."""
    sections: dict[str, Any] = {}
    if failover != DEFAULT_FAILOVER:
        sections["failover"] = failover_canonical(failover)
    if passive != DEFAULT_PASSIVE_HEALTH:
        sections["passive_health"] = passive_health_canonical(passive)
    return sections


def default_sections() -> dict[str, Any]:
    """The canonical form of each section at its defaults, as a diff compares them."""
    return {
        "failover": failover_canonical(DEFAULT_FAILOVER),
        "passive_health": passive_health_canonical(DEFAULT_PASSIVE_HEALTH),
    }
