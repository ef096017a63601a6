"""Edge-wide mirror rows: principal tokens and the history of applied config revisions."""

from __future__ import annotations

from django.db import models


class PrincipalToken(models.Model):
    """A client token mapping; only the sha256 of the token is known to the Edge."""

    token_ref = models.CharField(max_length=63, unique=True)
    token_hash_sha256 = models.CharField(max_length=64, unique=True)
    principal_ref = models.CharField(max_length=128, db_index=True)
    alias = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["principal_ref", "token_ref"]

    def __str__(self) -> str:
        return self.token_ref


class ConfigRevision(models.Model):
    """A config that was imported or applied. Exactly one row is active: the running config."""

    revision = models.CharField(max_length=71, db_index=True)
    yaml_text = models.TextField()
    source = models.CharField(max_length=200, help_text="Where the YAML came from.")
    created_at = models.DateTimeField(auto_now_add=True)
    active = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["active"],
                condition=models.Q(active=True),
                name="one_active_config_revision",
            )
        ]

    def __str__(self) -> str:
        return self.revision


class UsageRecord(models.Model):
    """One finished request: who asked, what ran where, how many tokens, how long, how it ended."""

    created_at = models.DateTimeField(db_index=True)
    request_id = models.CharField(max_length=64)
    principal_ref = models.CharField(max_length=128, blank=True, db_index=True)
    token_ref = models.CharField(max_length=63, blank=True, db_index=True)
    alias = models.CharField(max_length=64, blank=True)
    model = models.CharField(max_length=128, db_index=True)
    provider = models.CharField(max_length=63, blank=True)
    node = models.CharField(max_length=63, blank=True)
    context_class = models.CharField(max_length=8, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    queue_ms = models.FloatField(default=0)
    total_ms = models.FloatField(default=0)
    status = models.CharField(max_length=64, db_index=True)
    # Failover: how many providers the run went to, and which (comma-separated, in order).
    attempts = models.PositiveSmallIntegerField(default=0)
    providers_tried = models.CharField(max_length=1024, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.request_id} {self.model} {self.status}"
