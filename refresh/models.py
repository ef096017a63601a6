"""Refresh records: every refresh, kept as it happened, never edited.

An apply's record commits with the mirror, before its Node pushes are known; their answers are
then written into its ``result`` once, and nothing else ever changes a record.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class RefreshRecord(models.Model):
    """One refresh (dry run or apply, also refused ones): its result and its candidate YAML."""

    refresh_id = models.CharField(max_length=40, unique=True)
    request_id = models.CharField(max_length=64, blank=True)
    mode = models.CharField(max_length=16)
    status = models.CharField(max_length=24, db_index=True)
    base_revision = models.CharField(max_length=71)
    candidate_revision = models.CharField(max_length=71, blank=True)
    candidate_yaml = models.TextField()
    result = models.JSONField()
    requested_by = models.CharField(max_length=150, help_text="Admin user or loopback address.")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
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
