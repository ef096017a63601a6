"""The provider and model mirror pages cost the same few queries however many rows they list."""

from __future__ import annotations

import pytest
import yaml
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from edge.config import load_config_text
from edge.mirror import import_config
from providers.models import CatalogModel

pytestmark = pytest.mark.django_db


def with_extra_providers(config_text: str, count: int) -> str:
    """The config plus ``count`` echo providers on its first node, each with a model of its own."""
    data = yaml.safe_load(config_text)
    node = data["nodes"][0]
    adapter = node["adapters"][0]["id"]
    for index in range(count):
        provider = f"extra-{index}"
        node["providers"].append(
            {"id": provider, "adapter": adapter, "served_models": ["x"], "capacity": 1}
        )
        data["models"].append({"id": f"extra-model-{index}", "providers": {provider: "x"}})
    return yaml.safe_dump(data)


def mirror(config_text: str) -> None:
    import_config(load_config_text(config_text), config_text, source="test")


def queries_for(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(captured)


@pytest.mark.parametrize(
    "page", ["admin:providers_provider_changelist", "admin:providers_catalogmodel_changelist"]
)
def test_it_lists_mirror_rows_without_a_query_per_row(admin_client, default_config_text, page):
    mirror(default_config_text)
    few = queries_for(admin_client, reverse(page))
    mirror(with_extra_providers(default_config_text, 12))
    many = queries_for(admin_client, reverse(page))

    assert many == few


def test_it_shows_each_models_route_count(admin_client, default_config_text):
    mirror(with_extra_providers(default_config_text, 2))

    content = admin_client.get(reverse("admin:providers_catalogmodel_changelist")).content
    for model in CatalogModel.objects.all():
        assert f'<td class="field-route_count">{model.routes.count()}</td>'.encode() in content
