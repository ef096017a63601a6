from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString

from edge import usage_admin  # noqa: F401  (registers the usage admin)
from edge.admin_mixins import ReadOnlyAdmin, hash_display
from edge.models import ConfigRevision, PrincipalToken


@admin.register(PrincipalToken)
class PrincipalTokenAdmin(ReadOnlyAdmin):
    list_display = ("token_ref", "principal_ref", "alias", "token_hash")
    list_filter = ("principal_ref",)
    search_fields = ("token_ref", "principal_ref", "alias")
    fields = ("token_ref", "principal_ref", "alias", "token_hash")
    readonly_fields = fields

    @admin.display(description="token hash", ordering="token_hash_sha256")
    def token_hash(self, obj: PrincipalToken) -> SafeString | str:
        return hash_display(obj.token_hash_sha256)


@admin.register(ConfigRevision)
class ConfigRevisionAdmin(ReadOnlyAdmin):
    list_display = ("revision", "active", "source", "created_at")
    list_filter = ("active", "created_at")
    search_fields = ("revision", "source")
    fields = ("revision", "active", "source", "created_at", "yaml")
    readonly_fields = fields

    @admin.display(description="YAML")
    def yaml(self, obj: ConfigRevision) -> str:
        # Preformatted: a plain read-only field collapses the indentation nested config needs.
        return format_html(
            '<pre class="config-yaml" style="margin: 0; white-space: pre; overflow-x: auto">'
            "{}</pre>",
            obj.yaml_text,
        )
