from __future__ import annotations

from django.contrib import admin

from edge.admin_mixins import ConfigMirrorAdmin, ReadOnlyInline
from nodes.models import Adapter, Node


class AdapterInline(ReadOnlyInline):
    model = Adapter
    fields = ("adapter_id", "type", "options")
    readonly_fields = fields


@admin.register(Node)
class NodeAdmin(ConfigMirrorAdmin):
    list_display = ("node_id", "alias", "concurrency")
    search_fields = ("node_id", "alias")
    inlines = [AdapterInline]


@admin.register(Adapter)
class AdapterAdmin(ConfigMirrorAdmin):
    list_display = ("adapter_id", "node", "type")
    list_filter = ("type", "node")
    list_select_related = ("node",)
    search_fields = ("adapter_id", "node__node_id")
