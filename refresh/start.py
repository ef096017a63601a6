"""An Edge start with a changed config leaves a refresh record (mode ``start``).

Changes a refresh refuses (restart required: tokens, listeners, adapters) land by restarting the
Edge with the edited file. The start's record says what changed since the config that ran last,
so the history has no gap: the mirror, its active revision and the record commit together.
"""

from __future__ import annotations

from pathlib import Path

from django.db import transaction

from edge.config import ConfigError, EdgeConfig, load_config_text
from edge.mirror import ImportReport, import_config
from edge.models import ConfigRevision
from refresh.actor import at_start, current_os_user
from refresh.classify import classify
from refresh.models import RefreshRecord
from refresh.plan import RefreshResult, new_refresh_id


def import_at_start(config: EdgeConfig, yaml_text: str, path: Path) -> ImportReport:
    """Sync the mirror to the config the Edge starts with, recording a start when its revision
    is not the one that ran before (a first start, with none before it, records nothing)."""
    with transaction.atomic():
        previous = ConfigRevision.objects.filter(active=True).only("revision", "yaml_text").first()
        report = import_config(config, yaml_text, source=f"run_edge {path}")
        if previous is not None and report.revision_activated:
            _start_record(previous, config, yaml_text).save()
    return report


def _start_record(previous: ConfigRevision, config: EdgeConfig, yaml_text: str) -> RefreshRecord:
    result = RefreshResult(
        refresh_id=new_refresh_id(),
        mode="start",
        status="applied",
        base_revision=previous.revision,
        candidate_revision=config.revision,
    )
    try:
        result.classification = classify(
            load_config_text(previous.yaml_text).canonical, config.canonical
        )
    except ConfigError as exc:
        # Written by an older version whose configs this one no longer takes, say.
        result.errors = [
            {
                "path": "base_revision",
                "message": f"the config that ran before cannot be compared: {exc.issues[0]}",
            }
        ]
    os_user = current_os_user()
    return RefreshRecord.of(result, yaml_text, requested_by=at_start(os_user), os_user=os_user)
