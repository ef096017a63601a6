from __future__ import annotations

from django.contrib import admin

from edge.admin_mixins import ConfigMirrorAdmin
from edge.models import ConfigRevision, PrincipalToken


@admin.register(PrincipalToken)
class PrincipalTokenAdmin(ConfigMirrorAdmin):
    list_display = ("token_ref", "principal_ref", "alias", "short_hash")
    list_filter = ("principal_ref",)
    search_fields = ("token_ref", "principal_ref", "alias")

    @admin.display(description="token hash")
    def short_hash(self, obj: PrincipalToken) -> str:
        return f"{obj.token_hash_sha256[:12]}…"


@admin.register(ConfigRevision)
class ConfigRevisionAdmin(ConfigMirrorAdmin):
    list_display = ("revision", "active", "source", "created_at")
    list_filter = ("active", "created_at")
    search_fields = ("revision", "source")
    fields = ("revision", "active", "source", "created_at", "yaml_text")
    readonly_fields = fields
