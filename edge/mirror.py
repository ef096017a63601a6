"""`import_config`: make the database mirror match a validated config, in one transaction.

The YAML file is the source of truth; this writes its nodes, adapters, providers, models, routes
and principal tokens into the mirror tables and records the config revision as the active one.
The management command, the refresh apply and `run_edge` all call `import_config`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import models, transaction

from edge.config import EdgeConfig
from edge.models import ConfigRevision, PrincipalToken
from nodes.models import Adapter, Node
from nodes.wire.node_config import AdapterSpec, adapter_payload
from providers.models import CatalogModel, Provider, Route


@dataclass
class ImportReport:
    """What an import did (or, on a dry run, would do), one line per object."""

    revision: str
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    revision_activated: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted or self.revision_activated)

    def lines(self) -> list[str]:
        return (
            [f"create {line}" for line in self.created]
            + [f"update {line}" for line in self.updated]
            + [f"delete {line}" for line in self.deleted]
        )


@dataclass(frozen=True)
class _Table:
    """How one mirror table maps to the config: natural key, wanted values, and how to write."""

    label: str
    model: type[models.Model]
    key: Callable[[Any], str]
    read: Callable[[Any], dict[str, Any]]
    wanted: dict[str, dict[str, Any]]
    write: Callable[[Any, str, dict[str, Any]], None]
    related: tuple[str, ...] = ()


def import_config(
    config: EdgeConfig, yaml_text: str, *, source: str, dry_run: bool = False
) -> ImportReport:
    """Sync the mirror to ``config`` and make its revision the active one.

    A dry run computes the same report and leaves the database as it was. Re-importing the
    active revision with an unchanged mirror writes nothing.
    """
    with transaction.atomic():
        report = ImportReport(revision=config.revision)
        active = ConfigRevision.objects.select_for_update().filter(active=True).first()
        report.revision_activated = active is None or active.revision != config.revision
        refs = _References()
        tables = [(table, _existing(table)) for table in _tables(config, refs)]
        # Deletions first, children before parents: none is hidden in a cascade, and a freed
        # unique value (a token hash) can be taken by a new row.
        for table, existing in reversed(tables):
            for key in sorted(existing.keys() - table.wanted.keys()):
                report.deleted.append(f"{table.label} {key}")
                existing.pop(key).delete()
        for table, existing in tables:
            _upsert(table, existing, report, refs)
        if dry_run:
            # A dry run does exactly what an import does, then rolls it back.
            transaction.set_rollback(True)
        elif report.revision_activated:
            ConfigRevision.objects.filter(active=True).update(active=False)
            ConfigRevision.objects.create(
                revision=config.revision, yaml_text=yaml_text, source=source, active=True
            )
    return report


class _References:
    """Rows written so far by natural key, so later tables can point at them."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], models.Model] = {}

    def get(self, label: str, key: str) -> Any:
        return self.rows[(label, key)]


def _existing(table: _Table) -> dict[str, Any]:
    return {
        table.key(row): row for row in table.model._default_manager.select_related(*table.related)
    }


def _upsert(
    table: _Table, existing: dict[str, Any], report: ImportReport, refs: _References
) -> None:
    for key, values in sorted(table.wanted.items()):
        row = existing.pop(key, None)
        if row is None:
            report.created.append(f"{table.label} {key}")
            row = table.model()
        else:
            current = table.read(row)
            diffs = [f"{k}: {current[k]!r} -> {v!r}" for k, v in values.items() if current[k] != v]
            if not diffs:
                refs.rows[(table.label, key)] = row
                continue
            report.updated.append(f"{table.label} {key} ({'; '.join(diffs)})")
        table.write(row, key, values)
        row.save()
        refs.rows[(table.label, key)] = row


def _tables(config: EdgeConfig, refs: _References) -> Iterable[_Table]:
    """The tables in dependency order, so references resolve to rows already written."""
    nodes = {n.id: n for n in config.nodes}
    yield _Table(
        "node",
        Node,
        key=lambda row: row.node_id,
        read=lambda row: {
            "alias": row.alias,
            "token_hash_sha256": row.token_hash_sha256,
            "concurrency": row.concurrency,
        },
        wanted={
            n.id: {
                "alias": n.alias or "",
                "token_hash_sha256": n.token_hash_sha256,
                "concurrency": n.concurrency,
            }
            for n in config.nodes
        },
        write=lambda row, key, v: _set(row, node_id=key, **v),
    )
    yield _Table(
        "adapter",
        Adapter,
        key=lambda row: f"{row.node.node_id}/{row.adapter_id}",
        read=lambda row: {"type": row.type, "options": row.options},
        wanted={
            f"{n.id}/{a.id}": {"type": a.type, "options": _adapter_options(a)}
            for n in nodes.values()
            for a in n.adapters
        },
        write=lambda row, key, v: _set(
            row, node=refs.get("node", key.split("/")[0]), adapter_id=key.split("/")[1], **v
        ),
        related=("node",),
    )
    yield _Table(
        "provider",
        Provider,
        key=lambda row: row.provider_id,
        read=lambda row: {
            "node": row.node.node_id,
            "adapter": row.adapter.adapter_id,
            "served_models": row.served_models,
            "enabled": row.enabled,
            "capacity": row.capacity,
            "long_context_slots": row.long_context_slots,
            "priority": row.priority,
            "max_queue": row.max_queue,
            "queue_timeout_s": row.queue_timeout_s,
        },
        wanted={
            p.id: {
                "node": n.id,
                "adapter": p.adapter,
                "served_models": list(p.served_models),
                "enabled": p.enabled,
                "capacity": p.capacity,
                "long_context_slots": p.long_context_slots,
                "priority": p.priority,
                "max_queue": p.max_queue,
                "queue_timeout_s": p.queue_timeout_s,
            }
            for n in config.nodes
            for p in n.providers
        },
        write=lambda row, key, v: _set(
            row,
            provider_id=key,
            **{
                **v,
                "node": refs.get("node", v["node"]),
                "adapter": refs.get("adapter", f"{v['node']}/{v['adapter']}"),
            },
        ),
        related=("node", "adapter"),
    )
    yield _Table(
        "model",
        CatalogModel,
        key=lambda row: row.model_id,
        read=lambda row: {
            "default_max_tokens": row.default_max_tokens,
            "max_tokens_limit": row.max_tokens_limit,
        },
        wanted={
            m.id: {
                "default_max_tokens": m.generation.default_max_tokens,
                "max_tokens_limit": m.generation.max_tokens_limit,
            }
            for m in config.models
        },
        write=lambda row, key, v: _set(row, model_id=key, **v),
    )
    yield _Table(
        "route",
        Route,
        key=lambda row: f"{row.model.model_id}/{row.provider.provider_id}",
        read=lambda row: {"served_model": row.served_model},
        wanted={
            f"{m.id}/{provider_id}": {"served_model": served}
            for m in config.models
            for provider_id, served in m.providers.items()
        },
        write=lambda row, key, v: _set(
            row,
            model=refs.get("model", key.split("/")[0]),
            provider=refs.get("provider", key.split("/")[1]),
            **v,
        ),
        related=("model", "provider"),
    )
    yield _Table(
        "principal token",
        PrincipalToken,
        key=lambda row: row.token_ref,
        read=lambda row: {
            "token_hash_sha256": row.token_hash_sha256,
            "principal_ref": row.principal_ref,
            "alias": row.alias,
        },
        wanted={
            t.token_ref: {
                "token_hash_sha256": t.token_hash_sha256,
                "principal_ref": t.principal_ref,
                "alias": t.alias or "",
            }
            for t in config.openai.principal_tokens
        },
        write=lambda row, key, v: _set(row, token_ref=key, **v),
    )


def _adapter_options(adapter: AdapterSpec) -> dict[str, Any]:
    options: dict[str, Any] = dict(adapter_payload(adapter))
    del options["id"], options["type"]
    return options


def _set(row: models.Model, **values: Any) -> None:
    for name, value in values.items():
        setattr(row, name, value)
