"""Planning a refresh (plain Python): validate a candidate, classify it against the running config.

The result has the shape of DESIGN §6; every list is present, `[]` when empty.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, get_args

from edge.config import ConfigError, EdgeConfig, load_config_text
from edge.memory import collection_paused
from refresh.classify import Classification, classify

Mode = Literal["dry_run", "apply"]
# A record's mode: also `start`, an Edge started with a config other than the one that ran.
RecordMode = Literal["dry_run", "apply", "start"]
Status = Literal["no_change", "ok", "applied", "restart_required", "invalid", "stale"]
STATUSES: tuple[Status, ...] = get_args(Status)
# A refresh that went through (or, as a dry run, would); every other status is a refusal that
# changed nothing.
SUCCESSES: frozenset[Status] = frozenset({"no_change", "ok", "applied"})
PushStatus = Literal["acked", "rejected", "not_connected", "timeout"]


class NodePush(TypedDict):
    """How one Node took its pushed config."""

    node: str
    status: PushStatus
    error: str | None


@dataclass
class RefreshResult:
    refresh_id: str
    mode: RecordMode
    status: Status
    base_revision: str
    candidate_revision: str | None = None
    classification: Classification = field(default_factory=Classification)
    errors: list[dict[str, str]] = field(default_factory=list)
    node_pushes: list[NodePush] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "refresh_id": self.refresh_id,
            "mode": self.mode,
            "status": self.status,
            "base_revision": self.base_revision,
            "candidate_revision": self.candidate_revision,
            **self.classification.to_dict(),
            "errors": list(self.errors),
            "node_pushes": list(self.node_pushes),
        }


@dataclass
class Plan:
    """A checked candidate: the result so far and, when usable, the candidate config."""

    result: RefreshResult
    candidate: EdgeConfig | None

    @property
    def applicable(self) -> bool:
        return self.result.status in ("ok", "no_change") and self.candidate is not None


def new_refresh_id() -> str:
    return f"rf-{uuid.uuid4().hex[:16]}"


def plan_refresh(
    running: EdgeConfig,
    candidate_yaml: str | bytes,
    *,
    mode: Mode,
    base_revision: str | None = None,
    candidate_revision: str | None = None,
    refresh_id: str | None = None,
    load: Callable[[str | bytes], EdgeConfig] = load_config_text,
) -> Plan:
    """Load and classify ``candidate_yaml`` against ``running``; nothing is changed here.
    ``load`` loads the candidate (``refresh.plan_worker`` reuses one it loaded from this text).

    ``base_revision`` and ``candidate_revision`` pin a reviewed plan: when either differs from
    what is running or what was sent now, the result is ``stale``.
    """
    result = RefreshResult(
        refresh_id=refresh_id or new_refresh_id(),
        mode=mode,
        status="ok",
        base_revision=running.revision,
    )
    try:
        candidate = load(candidate_yaml)
    except ConfigError as exc:
        result.status = "invalid"
        result.errors = [{"path": i.path, "message": i.message} for i in exc.issues]
        return Plan(result, None)
    result.candidate_revision = candidate.revision
    with collection_paused():
        result.classification = classify(running.canonical, candidate.canonical)
    if base_revision is not None and base_revision != running.revision:
        result.status = "stale"
        result.errors = [
            {
                "path": "base_revision",
                "message": f"the plan was made against {base_revision}, but the running "
                f"config is now {running.revision}; plan again",
            }
        ]
    elif candidate_revision is not None and candidate_revision != candidate.revision:
        result.status = "stale"
        result.errors = [
            {
                "path": "candidate_revision",
                "message": f"the plan was reviewed for {candidate_revision}, but the candidate "
                f"is now {candidate.revision}; plan again",
            }
        ]
    elif result.classification.restart_required_paths:
        result.status = "restart_required"
    elif not result.classification.changes:
        result.status = "no_change"
    return Plan(result, candidate)
