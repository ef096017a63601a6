from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction

from edge.config import load_config_text
from edge.mirror import import_config
from edge.models import ConfigRevision, PrincipalToken
from nodes.models import Adapter, Node
from providers.models import CatalogModel, Provider, Route

pytestmark = pytest.mark.django_db


def mirror_counts() -> dict[str, int]:
    return {
        "nodes": Node.objects.count(),
        "adapters": Adapter.objects.count(),
        "providers": Provider.objects.count(),
        "models": CatalogModel.objects.count(),
        "routes": Route.objects.count(),
        "tokens": PrincipalToken.objects.count(),
        "revisions": ConfigRevision.objects.count(),
    }


def run_import(text: str, dry_run: bool = False):
    return import_config(load_config_text(text), text, source="test", dry_run=dry_run)


def test_it_creates_every_object_and_activates_the_revision(default_config_text):
    report = run_import(default_config_text)

    assert mirror_counts() == {
        "nodes": 1,
        "adapters": 2,
        "providers": 3,
        "models": 2,
        "routes": 5,
        "tokens": 1,
        "revisions": 1,
    }
    assert "provider echo-a" in report.created
    provider = Provider.objects.select_related("node", "adapter").get(provider_id="echo-overflow")
    assert (provider.node.node_id, provider.adapter.adapter_id) == ("node-local", "echo-slow")
    assert (provider.capacity, provider.priority, provider.max_queue) == (2, 50, 16)
    assert provider.queue_timeout_s == 30.0
    assert Route.objects.get(model__model_id="echo-long", provider=provider).served_model == (
        "echo-large"
    )
    active = ConfigRevision.objects.get(active=True)
    assert active.revision == report.revision
    assert active.yaml_text == default_config_text


def test_it_is_idempotent(default_config_text):
    run_import(default_config_text)
    before = mirror_counts()

    report = run_import(default_config_text)

    assert not report.changed
    assert report.lines() == []
    assert mirror_counts() == before


def test_it_updates_and_deletes(default_config_text):
    run_import(default_config_text)
    edited = default_config_text.replace("capacity: 2", "capacity: 3").replace(
        "echo-b: echo-small, ", ""
    )

    report = run_import(edited)

    assert report.updated == ["provider echo-overflow (capacity: 2 -> 3)"]
    assert report.deleted == ["route echo/echo-b"]
    assert Provider.objects.get(provider_id="echo-overflow").capacity == 3
    assert ConfigRevision.objects.filter(active=True).count() == 1
    assert ConfigRevision.objects.get(active=True).revision == report.revision


def test_it_replaces_one_config_with_another(default_config_text, pool_config_text):
    run_import(default_config_text)

    report = run_import(pool_config_text)

    assert "node node-local" in report.deleted
    assert "route echo/echo-a" in report.deleted
    assert set(Node.objects.values_list("node_id", flat=True)) == {"gpu-a", "gpu-b", "cloud"}
    adapter = Adapter.objects.get(adapter_id="vllm")
    assert adapter.type == "openai_http"
    assert adapter.options["base_url"] == "http://127.0.0.1:9000/v1"
    assert adapter.options["api_key_env"] == "VLLM_API_KEY"
    assert PrincipalToken.objects.filter(principal_ref="team-search").count() == 2


def test_it_changes_nothing_on_a_dry_run(default_config_text, pool_config_text):
    run_import(default_config_text)
    before = mirror_counts()

    report = run_import(pool_config_text, dry_run=True)

    assert report.changed and "node gpu-a" in report.created
    assert mirror_counts() == before
    assert Node.objects.get().node_id == "node-local"


def test_it_moves_a_provider_to_a_new_adapter(default_config_text):
    run_import(default_config_text)
    edited = default_config_text.replace("adapter: echo-slow", "adapter: echo")

    report = run_import(edited)

    assert report.updated == ["provider echo-overflow (adapter: 'echo-slow' -> 'echo')"]
    assert Provider.objects.get(provider_id="echo-overflow").adapter.adapter_id == "echo"


def test_it_allows_only_one_active_revision(default_config_text):
    run_import(default_config_text)

    with pytest.raises(IntegrityError), transaction.atomic():
        ConfigRevision.objects.create(revision="sha256:x", yaml_text="", source="t", active=True)


def test_it_leaves_the_database_untouched_on_an_invalid_file(tmp_path, default_config_text):
    run_import(default_config_text)
    before = mirror_counts()
    bad = tmp_path / "bad.yaml"
    bad.write_text(default_config_text.replace("capacity: 2", "capacity: 0"))

    with pytest.raises(CommandError) as refused:
        call_command("import_config", str(bad))

    assert refused.value.returncode == 1
    assert "nodes[node-local].providers[echo-overflow].capacity: must be >= 1 (got 0)" in str(
        refused.value
    )
    assert mirror_counts() == before


def test_it_reports_creates_and_then_nothing_from_the_command(
    tmp_path, default_config_text, capsys
):
    path = tmp_path / "edge.yaml"
    path.write_text(default_config_text)

    call_command("import_config", str(path), "--dry-run")
    dry = capsys.readouterr().out
    assert "create provider echo-a" in dry and "dry run: 14 created" in dry
    assert Node.objects.count() == 0

    call_command("import_config", str(path))
    call_command("import_config", str(path))
    out = capsys.readouterr().out
    assert "create node node-local" in out
    assert out.strip().splitlines()[-2].startswith("nothing changed")
