"""The config revision page in admin: the YAML as it was applied, indentation and all."""

from __future__ import annotations

import pytest
from django.urls import reverse

from edge.models import ConfigRevision

pytestmark = pytest.mark.django_db


def test_it_shows_nested_yaml_with_its_indentation_and_escaped(admin_client, runtime):
    revision = ConfigRevision.objects.get(active=True)
    revision.yaml_text += "# <script>alert(1)</script>\n"
    revision.save()

    response = admin_client.get(reverse("admin:edge_configrevision_change", args=[revision.pk]))

    content = response.content.decode()
    assert response.status_code == 200
    body = content.split('<pre class="config-yaml"')[1].split("</pre>")[0]
    assert "\nnodes:\n- id: node-a\n" in body
    assert "\n  providers:\n  - id: echo-1\n" in body  # nested keys keep their indentation
    assert "<br>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body and "<script>alert" not in body
