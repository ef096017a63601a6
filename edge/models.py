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
