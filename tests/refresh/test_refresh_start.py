"""An Edge start with a changed config leaves a refresh record (mode `start`)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync

from edge.config import load_config_text
from edge.models import ConfigRevision
from edge.tokens import sha256_hex
from refresh.actions import run_refresh
from refresh.actor import current_os_user
from refresh.history import outcomes
from refresh.models import RefreshRecord
from refresh.start import import_at_start
from tests.e2e.harness import EdgeProcess, Tokens, echo_config, free_port
from tests.refresh.refresh_helpers import TOKENS, edited, make_config, with_capacity, yaml_of

PATH = Path("edge.yaml")


def start_with(config: dict) -> RefreshRecord | None:
    """Start (the mirror side of it) with ``config``; the start's record, if it left one."""
    last = RefreshRecord.objects.order_by("-id").values_list("pk", flat=True).first()
    text = yaml_of(config)
    import_at_start(load_config_text(text), text, PATH)
    return RefreshRecord.objects.filter(pk__gt=last or 0).first()


def with_new_token(config: dict) -> dict:
    def edit(c: dict) -> None:
        c["openai"]["principal_tokens"].append(
            {
                "token_ref": "app-3",
                "token_hash_sha256": sha256_hex(TOKENS.client("app-3")),
                "principal_ref": "team-b",
            }
        )

    return edited(config, edit)


@pytest.mark.django_db
def test_it_records_nothing_on_a_first_start_or_an_unchanged_one():
    assert start_with(make_config()) is None
    assert start_with(make_config()) is None
    assert ConfigRevision.objects.get(active=True).source == f"run_edge {PATH}"


@pytest.mark.django_db
def test_it_records_a_start_with_a_changed_config():
    start_with(make_config())
    before = ConfigRevision.objects.get(active=True).revision

    record = start_with(with_new_token(with_capacity(make_config(), 8)))

    assert record is not None
    assert (record.mode, record.status) == ("start", "applied")
    assert record.base_revision == before
    assert record.candidate_revision == ConfigRevision.objects.get(active=True).revision
    assert record.candidate_yaml == yaml_of(with_new_token(with_capacity(make_config(), 8)))
    assert (record.os_user, record.requested_by) == (
        current_os_user(),
        f"start by {current_os_user()}",
    )
    changes = {(c["path"], c["op"], c["apply"]) for c in record.result["changes"]}
    assert changes == {
        ("nodes[node-a].providers[echo-1].capacity", "changed", "live"),
        ("openai.principal_tokens[app-3]", "added", "restart"),
    }
    assert record.result["errors"] == []


@pytest.mark.django_db
def test_it_records_a_start_even_when_the_previous_config_no_longer_loads():
    start_with(make_config())
    ConfigRevision.objects.filter(active=True).update(yaml_text="version: 2\n")

    record = start_with(with_capacity(make_config(), 8))

    assert record.result["changes"] == []
    assert record.result["errors"][0]["path"] == "base_revision"
    assert "the config that ran before cannot be compared" in record.result["errors"][0]["message"]


@pytest.mark.django_db(transaction=True)
def test_a_start_supersedes_a_dry_run_of_another_config(installed_runtime):
    plan = async_to_sync(run_refresh)(
        installed_runtime,
        mode="dry_run",
        config_yaml=yaml_of(with_capacity(make_config(), 8)),
        requested_by="test",
    )
    dry_run = RefreshRecord.objects.get(refresh_id=plan.refresh_id)

    start = start_with(with_capacity(make_config(), 6))

    fate = outcomes([dry_run])[dry_run.pk]
    assert (fate.state, fate.by.pk) == ("superseded", start.pk)


def test_a_restarted_edge_records_the_config_it_came_back_with(tmp_path):
    tokens = Tokens()
    config = echo_config(tokens, free_port(), free_port())
    edge = EdgeProcess(tmp_path, config)
    edge.start().stop()
    edge.config_path.write_text(yaml_of(with_capacity(config, 9)))

    edge.start().stop()

    with closing(edge.db()) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute("SELECT * FROM refresh_refreshrecord").fetchall()
        active = db.execute("SELECT revision FROM edge_configrevision WHERE active").fetchone()[
            "revision"
        ]
    assert len(rows) == 1, edge.log()
    assert (rows[0]["mode"], rows[0]["status"], rows[0]["candidate_revision"]) == (
        "start",
        "applied",
        active,
    )
    assert '"path": "nodes[node-a].providers[echo-1].capacity"' in rows[0]["result"]
