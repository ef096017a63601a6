"""Mirror of the config's providers, models and routes (the YAML file is the source of truth)."""

from __future__ import annotations

from django.db import models

from nodes.models import Adapter, Node


class Provider(models.Model):
    """A provider under a Node: one adapter serving some models, with its admission limits."""

    provider_id = models.CharField(max_length=63, unique=True)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="providers")
    adapter = models.ForeignKey(Adapter, on_delete=models.CASCADE, related_name="providers")
    served_models = models.JSONField(default=list)
    enabled = models.BooleanField(default=True)
    capacity = models.PositiveIntegerField()
    long_context_slots = models.PositiveIntegerField(null=True, blank=True)
    priority = models.PositiveIntegerField()
    max_queue = models.PositiveIntegerField()
    queue_timeout_s = models.FloatField()

    class Meta:
        ordering = ["provider_id"]

    def __str__(self) -> str:
        return self.provider_id


class CatalogModel(models.Model):
    """An OpenAI `model` key, which is also the provider pool's group key."""

    model_id = models.CharField(max_length=128, unique=True)
    default_max_tokens = models.PositiveIntegerField(null=True, blank=True)
    max_tokens_limit = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["model_id"]
        verbose_name = "model"

    def __str__(self) -> str:
        return self.model_id


class Route(models.Model):
    """A model served by a provider under the provider's own model name."""

    model = models.ForeignKey(CatalogModel, on_delete=models.CASCADE, related_name="routes")
    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="routes")
    served_model = models.CharField(max_length=256)

    class Meta:
        ordering = ["model__model_id", "provider__provider_id"]
        constraints = [models.UniqueConstraint(fields=["model", "provider"], name="unique_route")]

    def __str__(self) -> str:
        return f"{self.model.model_id} -> {self.provider.provider_id}"
