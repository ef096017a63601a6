"""Reading, checking and the canonical form of ``openai.policies`` (``edge.config.policies``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import fields as dataclass_fields
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from edge.config import formats
from edge.config.cross_checks import check_duplicates
from edge.config.fields import Fields, item_path, join
from edge.config.policies import (
    DEFAULT_CLASS,
    DEFAULT_WEIGHT,
    LIMIT_KEYS,
    PRIORITY_CLASSES,
    SETTING_KEYS,
    PolicyEntry,
    Settings,
)

POLICY_KEYS = ("principal_ref", *SETTING_KEYS, "token_overrides", "model_overrides")
MAX_LIMIT = 10**15
MAX_WEIGHT = 1000.0


def load_policies(
    fields: Fields, openai: Mapping[str, Any], tokens_of: Mapping[str, str]
) -> tuple[PolicyEntry, ...]:
    """``openai.policies``; ``tokens_of`` maps each principal token's token_ref to its principal."""
    entries = []
    for index, raw_entry in enumerate(fields.sequence(openai, "policies", "openai")):
        path = item_path("openai.policies", raw_entry, index, "principal_ref")
        entry = _entry(fields, raw_entry, path, tokens_of)
        if entry is not None:
            entries.append(entry)
    check_duplicates(fields, "openai.policies", [e.principal_ref for e in entries], "principal_ref")
    return tuple(sorted(entries, key=lambda e: e.principal_ref))


def check_policy_models(
    fields: Fields, entries: tuple[PolicyEntry, ...], model_ids: set[str]
) -> None:
    for entry in entries:
        for model in entry.model_overrides:
            if model not in model_ids:
                fields.error(
                    f"openai.policies[{entry.principal_ref}].model_overrides[{model}].model",
                    f"names model '{model}', which `models` does not define",
                )


def _entry(fields: Fields, raw: Any, path: str, tokens_of: Mapping[str, str]) -> PolicyEntry | None:
    data = fields.mapping(raw, path, POLICY_KEYS, required=("principal_ref",))
    if data is None:
        return None
    principal = fields.string(
        data, "principal_ref", path, pattern=formats.REF, expected=formats.REF_EXPECTED
    )
    settings = _settings(fields, data, path)

    def owned(token_ref: str, at: str) -> bool:
        owner = tokens_of.get(token_ref)
        if principal is None or owner == principal:
            return True
        where = "no principal token" if owner is None else f"principal '{owner}'"
        fields.error(
            join(at, "token_ref"),
            f"names token_ref '{token_ref}', which belongs to {where}; "
            f"an override names a token of '{principal}'",
        )
        return False

    token_overrides = _overrides(
        fields, data, f"{path}.token_overrides", "token_ref", formats.ID, formats.ID_EXPECTED, owned
    )
    model_overrides = _overrides(
        fields,
        data,
        f"{path}.model_overrides",
        "model",
        formats.MODEL_ID,
        formats.MODEL_ID_EXPECTED,
    )
    if principal is None or settings is None:
        return None
    # The entry is the base every override falls back to: its share keys spelled out, so
    # `weight: 1` and no weight are one canonical form.
    base = replace(
        settings,
        weight=DEFAULT_WEIGHT if settings.weight is None else settings.weight,
        priority_class=settings.priority_class or DEFAULT_CLASS,
    )
    return PolicyEntry(
        principal,
        base,
        token_overrides,
        model_overrides,
    )


def _overrides(
    fields: Fields,
    data: dict[str, Any],
    path: str,
    key: str,
    pattern: re.Pattern[str],
    expected: str,
    accept: Callable[[str, str], bool] = lambda ident, at: True,
) -> Mapping[str, Settings]:
    """``token_overrides`` or ``model_overrides``: settings keyed by ``key``, unique."""
    overrides: dict[str, Settings] = {}
    known = (key, *SETTING_KEYS)
    parent, _, name = path.rpartition(".")
    for index, raw_item in enumerate(fields.sequence(data, name, parent)):
        at = item_path(path, raw_item, index, key)
        item = fields.mapping(raw_item, at, known, required=(key,))
        if item is None:
            continue
        ident = fields.string(item, key, at, pattern=pattern, expected=expected)
        override = _settings(fields, item, at)
        if ident is None or not accept(ident, at) or override is None:
            continue
        if ident in overrides:
            fields.error(f"{path}[{ident}]", f"duplicate override for '{ident}'")
        overrides[ident] = override
    return MappingProxyType(dict(sorted(overrides.items())))


def _settings(fields: Fields, data: dict[str, Any], path: str) -> Settings | None:
    problems = len(fields.issues)
    limits = {
        key: fields.integer(data, key, path, default=None, minimum=1, maximum=MAX_LIMIT)
        for key in LIMIT_KEYS
    }
    weight = fields.number(data, "weight", path, default=None, above=0, maximum=MAX_WEIGHT)
    priority_class = fields.string(data, "priority_class", path, default=None)
    if priority_class is not None and priority_class not in PRIORITY_CLASSES:
        fields.error(
            join(path, "priority_class"),
            f"must be one of {', '.join(PRIORITY_CLASSES)} (got {priority_class!r})",
        )
    if len(fields.issues) > problems:
        return None
    return Settings(**limits, weight=weight, priority_class=priority_class)


def _settings_canonical(settings: Settings) -> dict[str, Any]:
    return {item.name: getattr(settings, item.name) for item in dataclass_fields(settings)}


def policies_canonical(entries: tuple[PolicyEntry, ...]) -> list[dict[str, Any]]:
    """Sorted by identity, every key spelled out (null: not stated, so inherited or unlimited)."""
    return [
        {
            "principal_ref": entry.principal_ref,
            **_settings_canonical(entry.settings),
            "token_overrides": [
                {"token_ref": ref, **_settings_canonical(s)}
                for ref, s in entry.token_overrides.items()
            ],
            "model_overrides": [
                {"model": model, **_settings_canonical(s)}
                for model, s in entry.model_overrides.items()
            ],
        }
        for entry in entries
    ]
