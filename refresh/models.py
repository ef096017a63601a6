"""Refresh records: every refresh, kept as it happened, never edited.

An apply's record commits with the mirror, before its Node pushes are known; their answers are
then written into its ``result`` once, and nothing else ever changes a record. What became of a
dry run (applied, superseded, stale) is derived from the records after it (``refresh.outcome``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from edge.json_pieces import PiecewiseJSONEncoder
from refresh.actor import MAX_OS_USER_CHARS, MAX_REQUESTED_BY_CHARS
from refresh.plan import RefreshResult

# A reason is a sentence or two, not a document: the body field, the CLI and the admin refuse more.
MAX_REASON_CHARS = 500


class RefreshRecord(models.Model):
    """One refresh (dry run or apply, also refused ones) or an Edge start with a changed config
    (mode ``start``): its result, its candidate YAML, who asked and why."""

    refresh_id = models.CharField(max_length=40, unique=True)
    request_id = models.CharField(max_length=64, blank=True)
    mode = models.CharField(max_length=16)
    status = models.CharField(max_length=24, db_index=True)
    base_revision = models.CharField(max_length=71)
    candidate_revision = models.CharField(max_length=71, blank=True)
    candidate_yaml = models.TextField()
    # Megabytes for a fleet-wide change, written by a thread beside the event loop: in pieces.
    result = models.JSONField(encoder=PiecewiseJSONEncoder)
    requested_by = models.CharField(
        max_length=MAX_REQUESTED_BY_CHARS,
        help_text="Who asked, in words: admin user, CLI user, token, start.",
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    token_name = models.CharField(
        max_length=64, blank=True, help_text="The operator token the refresh was sent with."
    )
    os_user = models.CharField(
        "OS user",
        max_length=MAX_OS_USER_CHARS,
        blank=True,
        help_text="The OS user who ran manage.py refresh (as it reported) or started the Edge.",
    )
    reason = models.CharField(
        max_length=MAX_REASON_CHARS, blank=True, help_text="Why, in the asker's words."
    )
    applied_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="applications",
        help_text="The dry run this apply carried out.",
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        # Viewing records is for every operator; applying a plan from the admin is not.
        permissions = [("apply_refreshrecord", "Can apply a dry run's plan from the admin")]

    def __str__(self) -> str:
        return f"{self.refresh_id} {self.mode} {self.status}"

    @classmethod
    def of(cls, result: RefreshResult, candidate_yaml: str, **asker: Any) -> RefreshRecord:
        """The record of ``result`` as it stands now, not saved yet; ``asker`` holds who asked
        (``requested_by``, ``user_id``, ``token_name``, …) and ``applied_from_id``."""
        return cls(
            refresh_id=result.refresh_id,
            mode=result.mode,
            status=result.status,
            base_revision=result.base_revision,
            candidate_revision=result.candidate_revision or "",
            # An invalid candidate may hold the very credential the validator refused (DESIGN §8).
            candidate_yaml="" if result.status == "invalid" else candidate_yaml,
            result=result.to_dict(),
            **asker,
        )
