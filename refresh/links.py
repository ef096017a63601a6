"""Links from a change's path to the mirror row it is about (node, adapter, provider, model,
route, principal token), looked up in a few queries however many paths there are."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import models
from django.urls import reverse

from edge.models import PrincipalToken
from nodes.models import Adapter, Node
from providers.models import CatalogModel, Provider, Route
from refresh.paths import Kind, object_of

# Per kind: the model and the fields that make its natural key, as `object_of` gives it.
_MIRROR: dict[Kind, tuple[type[models.Model], tuple[str, ...]]] = {
    "node": (Node, ("node_id",)),
    "adapter": (Adapter, ("node__node_id", "adapter_id")),
    "provider": (Provider, ("provider_id",)),
    "model": (CatalogModel, ("model_id",)),
    "route": (Route, ("model__model_id", "provider__provider_id")),
    "principal_token": (PrincipalToken, ("token_ref",)),
}
# Values per `IN` list at most, within SQLite's 999 parameters.
_BATCH = 400


def mirror_urls(paths: Iterable[str]) -> dict[str, str]:
    """The admin page of each path's object, for the paths whose object has a mirror row now
    (an item a dry run adds has none yet, one an apply removed none any more)."""
    objects = {path: found for path in paths if (found := object_of(path)) is not None}
    keys: dict[Kind, set[tuple[str, ...]]] = {}
    for kind, key in objects.values():
        keys.setdefault(kind, set()).add(key)
    pages: dict[tuple[Kind, tuple[str, ...]], str] = {}
    for kind, wanted in keys.items():
        model, fields = _MIRROR[kind]
        for key, pk in _rows(model, fields, wanted):
            pages[(kind, key)] = _change_url(model, pk)
    return {path: pages[found] for path, found in objects.items() if found in pages}


def _rows(
    model: type[models.Model], fields: tuple[str, ...], wanted: set[tuple[str, ...]]
) -> Iterable[tuple[tuple[str, ...], Any]]:
    ordered = sorted(wanted)
    for start in range(0, len(ordered), _BATCH):
        batch = ordered[start : start + _BATCH]
        # Filtered on each field's values, then matched whole: (a, y) is not asked for when
        # (a, x) and (b, y) are.
        lookups = {f"{field}__in": {key[i] for key in batch} for i, field in enumerate(fields)}
        for *key, pk in model._default_manager.filter(**lookups).values_list(*fields, "pk"):
            if tuple(key) in wanted:
                yield tuple(key), pk


def _change_url(model: type[models.Model], pk: Any) -> str:
    meta = model._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[pk])
