"""`import_config`: make the database mirror match a validated config, in one transaction.

The YAML file is the source of truth; this writes its nodes, adapters, providers, models, routes
and principal tokens into the mirror tables and records the config revision as the active one.
The management command, the refresh apply and `run_edge` all call `import_config`. It reads the
rows as plain values, diffs them in memory and writes in batches: a sync costs a few statements
per table, however large the fleet (docs/benchmarks.md). Given the config the mirror holds, it
reads and writes only the rows of what changed from it (`edge.mirror_delta`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, models, transaction
from django.db.models import Q
from django.db.models.functions import Cast

from edge.config import EdgeConfig
from edge.config.schema import Model as ConfigModel
from edge.config.schema import Node as ConfigNode
from edge.memory import collection_paused
from edge.mirror_delta import MirrorDelta, mirror_delta
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


# Rows per statement at most, so an `IN` list of pks stays within SQLite's 999 parameters.
BATCH = 500

# The pks of each table's rows by natural key, so later tables can point at them.
_Pks = dict[str, dict[str, int]]
# The name of each row by pk, per model, so the tables that point at them can say where.
_Names = dict[type[models.Model], dict[int, str]]


@dataclass(frozen=True)
class _Table:
    """How one mirror table maps to the config: natural key, wanted values, and how to write.

    ``key`` holds the fields whose values, joined by "/", make a row's natural key. ``fields``
    holds the fields compared. A reference (a foreign key) reads as the natural key of the row it
    points at: a provider's ``adapter`` as ``node/adapter``. ``columns``
    turns a wanted row into model field values, references as pks. ``rows`` selects the rows
    read: all of them, or those ``wanted`` covers when it holds a delta's part of the config.
    """

    label: str
    model: type[models.Model]
    key: tuple[str, ...]
    fields: tuple[str, ...]
    wanted: dict[str, dict[str, Any]]
    columns: Callable[[str, dict[str, Any], _Pks], dict[str, Any]]
    rows: Q


def import_config(
    config: EdgeConfig,
    yaml_text: str,
    *,
    source: str,
    dry_run: bool = False,
    base: EdgeConfig | None = None,
) -> ImportReport:
    """Sync the mirror to ``config`` and make its revision the active one.

    A dry run computes the same report and leaves the database as it was. Re-importing the
    active revision with an unchanged mirror writes nothing. ``base`` is the config the mirror
    was last synced to (on a refresh, the running one): while the active revision is still
    ``base``'s, only the rows of the nodes and models that differ from it are read and written,
    with the same report. Otherwise every row is compared.
    """
    # The garbage collector would only rescan the rows read and wanted: all live to the end of
    # the sync, and are freed before collections resume (or the first would scan them all).
    with collection_paused():
        return _sync(config, yaml_text, source=source, dry_run=dry_run, base=base)


def _sync(
    config: EdgeConfig, yaml_text: str, *, source: str, dry_run: bool, base: EdgeConfig | None
) -> ImportReport:
    with transaction.atomic():
        report = ImportReport(revision=config.revision)
        # Locked: no other sync can change the mirror between this check and the commit.
        active = (
            ConfigRevision.objects.select_for_update().filter(active=True).only("revision").first()
        )
        report.revision_activated = active is None or active.revision != config.revision
        delta: MirrorDelta | None = None
        if base is not None and active is not None and active.revision == base.revision:
            # The mirror holds ``base``: the rows of what did not change from it already match.
            delta = mirror_delta(base, config)
        names: _Names = {}
        tables = [(table, _existing(table, names)) for table in _tables(config, delta)]
        # Deletions first, children before parents: none is hidden in a cascade, and a freed
        # unique value (a token hash) can be taken by a new row.
        for table, existing in reversed(tables):
            gone = sorted(existing.keys() - table.wanted.keys())
            report.deleted += [f"{table.label} {key}" for key in gone]
            _delete(table.model, [existing.pop(key)[0] for key in gone])
        pks: _Pks = {}
        for table, existing in tables:
            pks[table.label] = _upsert(table, existing, report, pks)
        if dry_run:
            # A dry run does exactly what an import does, then rolls it back.
            transaction.set_rollback(True)
        elif report.revision_activated:
            ConfigRevision.objects.filter(active=True).update(active=False)
            ConfigRevision.objects.create(
                revision=config.revision, yaml_text=yaml_text, source=source, active=True
            )
    return report


def _existing(table: _Table, names: _Names) -> dict[str, tuple[int, dict[str, Any]]]:
    """The table's rows as (pk, current values) by natural key, read as plain values; their
    names go into ``names`` for the tables read after it."""
    columns: list[Any] = [*table.key, *table.fields]
    fields = list(map(table.model._meta.get_field, columns))
    # References are read as pks and named here: cheaper than a join for each.
    refs = [
        (i, names[field.target_field.model])
        for i, field in enumerate(fields)
        if isinstance(field, models.ForeignKey)
    ]
    # JSON is read as text and each distinct text decoded once: a fleet's providers share a few
    # served-model lists, and decoding every value took a sixth of the read.
    json_at = [i for i, field in enumerate(fields) if isinstance(field, models.JSONField)]
    for i in json_at:
        columns[i] = Cast(columns[i], models.TextField())
    decoded: dict[str, Any] = {}
    width = len(table.key)
    own = names[table.model] = {}
    existing: dict[str, tuple[int, dict[str, Any]]] = {}
    rows = table.model._default_manager.filter(table.rows).order_by()
    for pk, *row in rows.values_list("pk", *columns):
        for i, named in refs:
            row[i] = named[row[i]]
        for i in json_at:
            if row[i] not in decoded:
                decoded[row[i]] = json.loads(row[i])
            row[i] = decoded[row[i]]
        own[pk] = "/".join(row[:width])
        existing["/".join(row[:width])] = (pk, dict(zip(table.fields, row[width:], strict=True)))
    return existing


def _delete(model: type[models.Model], pks: list[int]) -> None:
    # No cascade: a kept child may still point at a deleted parent until its update below
    # moves it (the foreign keys are checked at commit), and a cascade would delete it.
    for start in range(0, len(pks), BATCH):
        rows = model._default_manager.filter(pk__in=pks[start : start + BATCH])
        rows._raw_delete(rows.db)


def _upsert(
    table: _Table, existing: dict[str, tuple[int, dict[str, Any]]], report: ImportReport, pks: _Pks
) -> dict[str, int]:
    """Create and update the table's rows; their pks by natural key."""
    wanted = table.wanted
    updated: dict[tuple[str, ...], list[tuple[int, dict[str, Any]]]] = {}
    for key in sorted(key for key, (_, current) in existing.items() if current != wanted[key]):
        pk, current = existing[key]
        values = wanted[key]
        changed = tuple(k for k, v in values.items() if current[k] != v)
        diffs = "; ".join(f"{k}: {current[k]!r} -> {values[k]!r}" for k in changed)
        report.updated.append(f"{table.label} {key} ({diffs})")
        updated.setdefault(changed, []).append((pk, table.columns(key, values, pks)))
    new = sorted(wanted.keys() - existing.keys())
    report.created += [f"{table.label} {key}" for key in new]
    created = [table.model(**table.columns(key, wanted[key], pks)) for key in new]
    manager = table.model._default_manager
    _release_moving_unique_values(table, existing, updated)
    # Updates before creates: a unique value an update frees can be taken by a new row.
    for fields, rows in updated.items():
        _update(table.model, fields, rows)
    manager.bulk_create(created, batch_size=BATCH)
    return {key: pk for key, (pk, _) in existing.items()} | {
        key: row.pk for key, row in zip(new, created, strict=True)
    }


def _release_moving_unique_values(
    table: _Table,
    existing: dict[str, tuple[int, dict[str, Any]]],
    updated: dict[tuple[str, ...], list[tuple[int, dict[str, Any]]]],
) -> None:
    """A unique value that moves to a row from another one still holding it (two tokens' hashes
    swapped) would fail the unique check of the first update: every updated row lets go of its
    value of that field first, taking a placeholder no real value can be."""
    meta = table.model._meta
    for name in table.fields:
        field = meta.get_field(name)
        if not getattr(field, "unique", False):
            continue
        holders = {current[name]: pk for pk, current in existing.values()}
        moving = [
            pk
            for fields, rows in updated.items()
            if name in fields
            for pk, values in rows
            if holders.get(values[name], pk) != pk
        ]
        if moving:
            releasing = [pk for fields, rows in updated.items() if name in fields for pk, _ in rows]
            _update(table.model, (name,), [(pk, {name: f"~released-{pk}"}) for pk in releasing])


def _update(
    model: type[models.Model], names: tuple[str, ...], rows: list[tuple[int, dict[str, Any]]]
) -> None:
    """Set the fields ``names`` of each row (pk, column values by field name or attname), one
    ``UPDATE`` statement sent for all of them with ``executemany``.

    ``bulk_update`` builds one ``CASE`` expression per field over each batch, in Python: a change
    that reconfigures a whole fleet (30,000 providers at 3,000 nodes) cost seconds of the
    interpreter that the Edge's event loop shares. Here the rows' values are prepared once and the
    statements run in the database driver.
    """
    meta = model._meta
    targets = [_concrete(meta.get_field(name)) for name in names]
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in targets)
    sql = f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote(meta.pk.column)} = %s"
    params = [
        # ``columns`` names every value by its attname: a reference's as its pk (``node_id``).
        [field.get_db_prep_save(values[field.attname], connection) for field in targets] + [pk]
        for pk, values in rows
    ]
    with connection.cursor() as cursor:
        for start in range(0, len(params), BATCH):
            cursor.executemany(sql, params[start : start + BATCH])


def _concrete(field: object) -> models.Field[Any, Any]:
    if not isinstance(field, models.Field) or field.column is None:
        raise TypeError(f"{field} is not a column")
    return field


def _tables(config: EdgeConfig, delta: MirrorDelta | None) -> Iterable[_Table]:
    """The tables in dependency order, so references resolve to rows already written: all of
    the config, or the part of it ``delta`` names (its nodes, its models, their routes)."""
    nodes: Iterable[ConfigNode] = config.nodes
    models: Iterable[ConfigModel] = config.models
    # The nodes and models synced, and the providers whose routes are; None: all of them.
    node_ids: frozenset[str] | None = None
    model_ids: frozenset[str] | None = None
    routed: set[str] | None = None
    if delta is not None:
        node_ids, model_ids = delta.nodes, delta.models
        nodes = [node for node in map(config.node, node_ids) if node is not None]
        models = [model for model in config.models if model.id in model_ids]
        # A route is its model's and its provider's node's: synced when both are the delta's.
        routed = {p.id for n in nodes for p in n.providers}

    def within(lookup: str, names: frozenset[str] | None) -> Q:
        return Q() if names is None else Q(**{f"{lookup}__in": names})

    yield _Table(
        "node",
        Node,
        key=("node_id",),
        fields=("alias", "token_hash_sha256", "concurrency"),
        wanted={
            n.id: {
                "alias": n.alias or "",
                "token_hash_sha256": n.token_hash_sha256,
                "concurrency": n.concurrency,
            }
            for n in nodes
        },
        columns=lambda key, v, pks: {"node_id": key, **v},
        rows=within("node_id", node_ids),
    )
    yield _Table(
        "adapter",
        Adapter,
        key=("node", "adapter_id"),
        fields=("type", "options"),
        wanted={
            f"{n.id}/{a.id}": {"type": a.type, "options": _adapter_options(a)}
            for n in nodes
            for a in n.adapters
        },
        columns=lambda key, v, pks: {
            "node_id": pks["node"][key.split("/")[0]],
            "adapter_id": key.split("/")[1],
            **v,
        },
        rows=within("node__node_id", node_ids),
    )
    yield _Table(
        "provider",
        Provider,
        key=("provider_id",),
        fields=(
            "node",
            "adapter",
            "served_models",
            "enabled",
            "capacity",
            "long_context_slots",
            "priority",
            "max_queue",
            "queue_timeout_s",
        ),
        wanted={
            p.id: {
                "node": n.id,
                # The adapter's natural key: a provider that moves to another node's adapter of
                # the same id points at another row.
                "adapter": f"{n.id}/{p.adapter}",
                "served_models": list(p.served_models),
                "enabled": p.enabled,
                "capacity": p.capacity,
                "long_context_slots": p.long_context_slots,
                "priority": p.priority,
                "max_queue": p.max_queue,
                "queue_timeout_s": p.queue_timeout_s,
            }
            for n in nodes
            for p in n.providers
        },
        columns=lambda key, v, pks: {
            **{name: value for name, value in v.items() if name not in ("node", "adapter")},
            "provider_id": key,
            "node_id": pks["node"][v["node"]],
            "adapter_id": pks["adapter"][v["adapter"]],
        },
        rows=within("node__node_id", node_ids),
    )
    yield _Table(
        "model",
        CatalogModel,
        key=("model_id",),
        fields=("default_max_tokens", "max_tokens_limit"),
        wanted={
            m.id: {
                "default_max_tokens": m.generation.default_max_tokens,
                "max_tokens_limit": m.generation.max_tokens_limit,
            }
            for m in models
        },
        columns=lambda key, v, pks: {"model_id": key, **v},
        rows=within("model_id", model_ids),
    )
    yield _Table(
        "route",
        Route,
        key=("model", "provider"),
        fields=("served_model",),
        wanted={
            f"{m.id}/{provider_id}": {"served_model": served}
            for m in models
            for provider_id, served in m.providers.items()
            if routed is None or provider_id in routed
        },
        columns=lambda key, v, pks: {
            # A model id may hold a "/"; a provider id never does.
            "model_id": pks["model"][key.rpartition("/")[0]],
            "provider_id": pks["provider"][key.rpartition("/")[2]],
            **v,
        },
        rows=within("model__model_id", model_ids) & within("provider__node__node_id", node_ids),
    )
    yield _Table(
        "principal token",
        PrincipalToken,
        key=("token_ref",),
        fields=("token_hash_sha256", "principal_ref", "alias"),
        wanted={
            t.token_ref: {
                "token_hash_sha256": t.token_hash_sha256,
                "principal_ref": t.principal_ref,
                "alias": t.alias or "",
            }
            for t in config.openai.principal_tokens
        },
        columns=lambda key, v, pks: {"token_ref": key, **v},
        rows=Q(),  # a few rows: always all of them
    )


def _adapter_options(adapter: AdapterSpec) -> dict[str, Any]:
    options: dict[str, Any] = dict(adapter_payload(adapter))
    del options["id"], options["type"]
    return options
