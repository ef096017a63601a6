from __future__ import annotations

from django.contrib import admin

from edge.admin_mixins import ReadOnlyAdmin, ReadOnlyInline
from nodes.models import Adapter, Node


class AdapterInline(ReadOnlyInline):
    model = Adapter
    fields = ("adapter_id", "type", "options")
    readonly_fields = fields


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = ("node_id", "alias", "concurrency", "acked_revision", "last_acked_at")
    search_fields = ("node_id", "alias", "last_acked_revision")
    list_filter = ("adapters__type", "last_acked_at")
    # The last two are written by the Edge when the Node acks a config, never by the YAML.
    fields = (
        "node_id",
        "alias",
        "token_hash_sha256",
        "concurrency",
        "last_acked_revision",
        "last_acked_at",
    )
    readonly_fields = fields
    inlines = [AdapterInline]

    @admin.display(description="last acked revision", ordering="last_acked_revision")
    def acked_revision(self, node: Node) -> str:
        algorithm, _, digest = node.last_acked_revision.partition(":")
        return f"{algorithm}:{digest[:12]}…" if digest else "-"


@admin.register(Adapter)
class AdapterAdmin(ReadOnlyAdmin):
    list_display = ("adapter_id", "node", "type")
    list_filter = ("type", "node")
    list_select_related = ("node",)
    search_fields = ("adapter_id", "node__node_id")
