"""Mirror of the config's nodes and their adapters (the YAML file is the source of truth)."""

from __future__ import annotations

from django.db import models


class Node(models.Model):
    """A Node from the Edge config: a worker process that dials in over a websocket."""

    node_id = models.CharField(max_length=63, unique=True)
    alias = models.CharField(max_length=63, blank=True)
    token_hash_sha256 = models.CharField(max_length=64)
    concurrency = models.PositiveIntegerField(
        null=True, blank=True, help_text="Legacy metadata; never used for admission."
    )
    # Runtime facts, written by the Edge rather than the config.
    last_acked_revision = models.CharField(max_length=71, blank=True)
    last_acked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node_id"]

    def __str__(self) -> str:
        return self.node_id


class Adapter(models.Model):
    """An adapter a Node runs (`echo` or `openai_http`), with its type-specific options."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="adapters")
    adapter_id = models.CharField(max_length=63)
    type = models.CharField(max_length=32)
    options = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["node__node_id", "adapter_id"]
        constraints = [
            models.UniqueConstraint(fields=["node", "adapter_id"], name="unique_adapter_per_node")
        ]

    def __str__(self) -> str:
        return f"{self.node.node_id}/{self.adapter_id}"
