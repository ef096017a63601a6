"""What a refresh writes: its record; for an apply, the mirror, the record and the config file
in one transaction, and later the Nodes' answers onto that record.

These run in a thread of the Edge, or in the plan worker on the plan it holds
(``refresh.worker_writes``): ``RecordOrder`` and ``ApplyOrder`` are what the Edge sends there.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction

from edge.config import EdgeConfig
from edge.json_key_set import JSONKeySet
from edge.mirror import import_config
from edge.models import ConfigRevision
from refresh.models import RefreshRecord
from refresh.plan import RefreshResult, Status


@dataclass(frozen=True, slots=True)
class RecordOrder:
    """A record to save of a plan: the outcome the Edge gave it, and who asked (the record's
    ``requested_by``, ``user_id``, ``token_name``, … and ``applied_from_id``)."""

    status: Status
    errors: list[dict[str, str]]
    asker: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ApplyOrder:
    """An apply to write: its record, the config file (if any), and the check that this Edge
    may still commit (``edge.ha.cluster.LeaderCommitGuard``: plain values, run where it writes)."""

    record: RecordOrder
    config_path: Path | None
    guard: Callable[[], None] | None


def write_apply(
    config_path: Path | None,
    running: EdgeConfig,
    candidate: EdgeConfig,
    config_yaml: str,
    record: RefreshRecord,
    guard: Callable[[], None] | None = None,
) -> None:
    """Mirror, record and config file together: a file that cannot be written rolls the mirror
    and the record back, and no applied revision is ever committed without its record.

    The mirror is synced by delta over ``running``, the config the plan was made against
    (when the active revision is still its own). The backup holds the config that was running
    (the active revision's YAML), which differs from the file when the operator edited the file
    in place before this apply.
    """
    with transaction.atomic():
        if guard is not None:
            guard()  # first: the new leader's takeover reads the revision after this commits
        active = ConfigRevision.objects.filter(active=True).only("yaml_text").first()
        import_config(candidate, config_yaml, source="refresh", base=running)
        record.save()
        if config_path is not None:
            write_atomically(config_path, config_yaml, backup=active.yaml_text if active else None)


def write_atomically(path: Path, text: str, backup: str | None) -> None:
    """Replace ``path`` in one rename; ``backup`` (if any) goes to ``<name>.bak`` first."""
    if backup is not None:
        _replace(path.with_name(path.name + ".bak"), backup)
    _replace(path, text)


def _replace(path: Path, text: str) -> None:
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def save_record(result: RefreshResult, config_yaml: str, order: RecordOrder) -> None:
    """The record of a refresh that changed nothing."""
    RefreshRecord.of(result, config_yaml, **order.asker).save()


def save_pushes(result: RefreshResult) -> None:
    """The Nodes' answers, known only after the swap: the one later write to an applied
    record, of its ``node_pushes`` alone (the rest is megabytes for a fleet-wide change)."""
    pushes = JSONKeySet("result", "node_pushes", result.node_pushes)
    RefreshRecord.objects.filter(refresh_id=result.refresh_id).update(result=pushes)
