"""Edge-wide mirror rows: principal tokens and the history of applied config revisions."""

from __future__ import annotations

from django.db import models

from edge.usage_rollup import DAY_KEY, HOUR_KEY, LATENCY_FIELDS

# Usage columns the admin filters its rows by (each has an index with the list's order).
USAGE_FILTERS = ("principal_ref", "token_ref", "model", "provider", "status")


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
    principal_ref = models.CharField(max_length=128, blank=True)
    token_ref = models.CharField(max_length=63, blank=True)
    alias = models.CharField(max_length=64, blank=True)
    model = models.CharField(max_length=128)
    # The OpenAI endpoint (`chat.completions`, `completions`, `embeddings`, `responses`).
    endpoint = models.CharField(max_length=32, default="chat.completions")
    provider = models.CharField(max_length=63, blank=True)
    node = models.CharField(max_length=63, blank=True)
    context_class = models.CharField(max_length=8, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    queue_ms = models.FloatField(default=0)
    total_ms = models.FloatField(default=0)
    status = models.CharField(max_length=64)
    # Failover: how many providers the run went to, and which (comma-separated, in order).
    attempts = models.PositiveSmallIntegerField(default=0)
    providers_tried = models.CharField(max_length=1024, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        # The admin lists newest first, filtered by one of these at a time: each index serves
        # the filter and the order together, so a page reads its rows and no more (the id that
        # breaks ties is SQLite's rowid in every index; PostgreSQL sorts ties as it goes).
        indexes = [
            models.Index(fields=["request_id"], name="usage_request_id"),
            *(
                models.Index(fields=[name, "created_at"], name=f"usage_{name}_created")
                for name in USAGE_FILTERS
            ),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} {self.model} {self.status}"


class UsageSums(models.Model):
    """What a rollup row adds up (`edge/usage_rollup.py`): requests, tokens, latency counts.

    Kept by the usage writer in the transaction that stores the rows, so the sums always match
    them. One column per latency bucket, added below from the bucket list.
    """

    principal_ref = models.CharField(max_length=128, blank=True)
    token_ref = models.CharField(max_length=63, blank=True)
    model = models.CharField(max_length=128)
    status = models.CharField(max_length=64)
    requests = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        abstract = True


# Before the rollups below: they inherit the abstract model's fields as they are at that point.
for _name in LATENCY_FIELDS:
    UsageSums.add_to_class(_name, models.PositiveIntegerField(default=0))


class UsageRollup(UsageSums):
    """Usage per hour, principal, token_ref, model and status: the sums of short periods."""

    hour = models.DateTimeField()
    day = models.DateField(help_text="The UTC day of the hour.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=HOUR_KEY, name="usage_rollup_key")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.token_ref or self.principal_ref} {self.model}"


class UsageDayRollup(UsageSums):
    """Usage per UTC day, principal, token_ref, model and status: the sums of long periods."""

    day = models.DateField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=DAY_KEY, name="usage_day_rollup_key")]

    def __str__(self) -> str:
        return f"{self.day} {self.token_ref or self.principal_ref} {self.model}"
