"""JSONKeySet: one top-level key of a JSON column set by the database, the rest kept."""

from __future__ import annotations

import pytest

from edge.json_key_set import JSONKeySet
from refresh.models import RefreshRecord


def record(refresh_id: str, result: dict[str, object]) -> RefreshRecord:
    return RefreshRecord.objects.create(
        refresh_id=refresh_id,
        mode="apply",
        status="applied",
        base_revision="sha256:old",
        candidate_yaml="",
        result=result,
        requested_by="test",
    )


@pytest.mark.django_db
def test_it_sets_one_key_and_keeps_the_others_and_the_other_rows() -> None:
    changes = [{"path": f"nodes[{i}].capacity", "old": i, "new": None} for i in range(50)]
    record("rf-1", {"status": "applied", "changes": changes, "node_pushes": []})
    record("rf-2", {"status": "applied", "node_pushes": []})
    pushes = [{"node": "node-é", "status": "acked", "error": None}]

    RefreshRecord.objects.filter(refresh_id="rf-1").update(
        result=JSONKeySet("result", "node_pushes", pushes)
    )

    assert RefreshRecord.objects.get(refresh_id="rf-1").result == {
        "status": "applied",
        "changes": changes,
        "node_pushes": pushes,
    }
    assert RefreshRecord.objects.get(refresh_id="rf-2").result["node_pushes"] == []


@pytest.mark.django_db
def test_a_missing_key_is_added() -> None:
    record("rf-1", {"status": "applied"})

    RefreshRecord.objects.update(result=JSONKeySet("result", "node_pushes", [{"node": "a"}]))

    assert RefreshRecord.objects.get().result == {
        "status": "applied",
        "node_pushes": [{"node": "a"}],
    }


@pytest.mark.parametrize("key", ["", "a.b", "x'); --", "{a}"])
def test_only_a_plain_key_is_taken(key: str) -> None:
    with pytest.raises(ValueError, match="not a plain key"):
        JSONKeySet("result", key, [])
