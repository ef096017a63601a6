"""Refused candidates: their errors, in `/refresh` results and records, quote no secret."""

from __future__ import annotations

import json
import logging

import pytest
from asgiref.sync import sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.forms.models import model_to_dict

from refresh.actions import run_refresh
from refresh.models import RefreshRecord
from tests.edge.config.secret_plants import leaked, plant_paths, planted
from tests.refresh.refresh_helpers import make_config, yaml_of

pytestmark = pytest.mark.django_db(transaction=True)


@sync_to_async
def record_of(refresh_id: str) -> str:
    record = RefreshRecord.objects.get(refresh_id=refresh_id)
    return json.dumps(model_to_dict(record), cls=DjangoJSONEncoder)


@pytest.mark.parametrize("mode", ["dry_run", "apply"])
async def test_a_refused_candidate_quotes_no_planted_secret(runtime, caplog, mode) -> None:
    caplog.set_level(logging.DEBUG)
    config = make_config()

    result = await run_refresh(
        runtime, mode=mode, config_yaml=yaml_of(planted(config)), requested_by="test"
    )

    assert result.status == "invalid"
    assert plant_paths(config) <= {error["path"] for error in result.errors}
    assert leaked(json.dumps(result.to_dict())) == []
    assert leaked(await record_of(result.refresh_id)) == []
    assert leaked(caplog.text) == []
