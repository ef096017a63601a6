from __future__ import annotations

from django.contrib import admin
from django.utils.safestring import SafeString

from edge.admin_mixins import ReadOnlyAdmin, ReadOnlyInline, hash_display
from edge.dashboard.links import dashboard_link
from nodes.models import Adapter, Node


class AdapterInline(ReadOnlyInline):
    model = Adapter
    fields = ("adapter_id", "type", "options")
    readonly_fields = fields


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = ("node_id", "alias", "concurrency", "acked_revision", "last_acked_at", "live")
    search_fields = ("node_id", "alias", "last_acked_revision")
    list_filter = ("adapters__type", "last_acked_at")
    # The last two are written by the Edge when the Node acks a config, never by the YAML.
    fields = (
        "node_id",
        "alias",
        "token_hash",
        "concurrency",
        "live",
        "last_acked_revision",
        "last_acked_at",
    )
    readonly_fields = fields
    inlines = [AdapterInline]

    @admin.display(description="live state")
    def live(self, node: Node) -> str:
        return dashboard_link("node", node.node_id)

    @admin.display(description="last acked revision", ordering="last_acked_revision")
    def acked_revision(self, node: Node) -> SafeString | str:
        return hash_display(node.last_acked_revision)

    @admin.display(description="token hash")
    def token_hash(self, node: Node) -> SafeString | str:
        return hash_display(node.token_hash_sha256)


@admin.register(Adapter)
class AdapterAdmin(ReadOnlyAdmin):
    list_display = ("adapter_id", "node", "type")
    list_filter = ("type", "node")
    list_select_related = ("node",)
    search_fields = ("adapter_id", "node__node_id")
