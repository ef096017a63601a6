"""Checks across items of a config: unique ids and hashes, listener ports, references."""

from __future__ import annotations

from collections import Counter
from typing import Any

from edge.config.fields import Fields
from edge.config.schema import EdgeSection, Model, Node, OpenAISection


def check_duplicates(fields: Fields, path: str, values: list[str], what: str) -> None:
    for value, count in Counter(values).items():
        if count > 1:
            fields.error(f"{path}[{value}]", f"duplicate {what} '{value}' ({count} times)")


def check_unique_ids(
    fields: Fields, nodes: tuple[Node, ...], models: tuple[Model, ...], openai: OpenAISection | None
) -> None:
    check_duplicates(fields, "nodes", [n.id for n in nodes], "node id")
    check_duplicates(fields, "models", [m.id for m in models], "model id")
    tokens = openai.principal_tokens if openai else ()
    check_duplicates(fields, "openai.principal_tokens", [t.token_ref for t in tokens], "token_ref")
    _report_reuse(
        fields,
        [(f"nodes[{n.id}].alias", n.alias) for n in nodes if n.alias],
        "node alias '{value}' is already used at {first}",
    )
    _report_reuse(
        fields,
        [(f"nodes[{n.id}].providers[{p.id}]", p.id) for n in nodes for p in n.providers],
        "provider id '{value}' is already used at {first}; provider ids are unique across nodes",
    )
    _report_reuse(
        fields,
        [
            (f"openai.principal_tokens[{t.token_ref}].token_hash_sha256", t.token_hash_sha256)
            for t in tokens
        ]
        + [(f"nodes[{n.id}].token_hash_sha256", n.token_hash_sha256) for n in nodes],
        "this hash is already used at {first}; every node and principal token needs its own token",
    )


def check_listener_ports(
    fields: Fields, edge: EdgeSection | None, openai: OpenAISection | None
) -> None:
    """Listeners are told apart by port, so each needs its own."""
    places = []
    if edge is not None:
        places += [("edge.listen", edge.listen), ("edge.admin_listen", edge.admin_listen)]
    if openai is not None and openai.listen:
        places.append(("openai.listen", openai.listen))
    _report_reuse(
        fields,
        [(path, listen.rpartition(":")[2]) for path, listen in places],
        "port {value} is already used by {first}; each listener needs its own port",
    )


def _report_reuse(fields: Fields, places: list[tuple[str, str]], message: str) -> None:
    """Report every place whose value an earlier place already uses."""
    first: dict[str, str] = {}
    for path, value in places:
        if value in first:
            fields.error(path, message.format(value=value, first=first[value]))
        else:
            first[value] = path


def check_references(
    fields: Fields,
    nodes: tuple[Node, ...],
    models: tuple[Model, ...],
    declared_providers: set[str],
) -> None:
    providers = {p.id: p for n in nodes for p in n.providers}
    for model in models:
        for provider_id, served in model.providers.items():
            path = f"models[{model.id}].providers[{provider_id}]"
            provider = providers.get(provider_id)
            if provider is None and provider_id in declared_providers:
                continue  # declared but invalid: reported where it is declared
            if provider is None:
                fields.error(path, f"names provider '{provider_id}', which no node defines")
            elif served not in provider.served_models:
                fields.error(
                    path,
                    f"served model '{served}' is not in that provider's served_models "
                    f"({', '.join(provider.served_models)})",
                )


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def declared_ids(raw_items: Any) -> set[str]:
    """The ids a raw list declares, valid or not: a reference to one is not dangling."""
    return {
        item["id"]
        for item in as_list(raw_items)
        if isinstance(item, dict) and isinstance(item.get("id"), str)
    }
