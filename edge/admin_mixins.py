"""What every admin page shares: read-only bases (mirror rows come from the YAML, records and
usage are history), one way to show a hash, statuses in colour (edge/static/edge/admin.css)."""

from __future__ import annotations

from typing import Any, Literal

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

# Enough hex digits to tell tokens and revisions apart at a glance; the whole value on hover.
HASH_SHOWN_DIGITS = 12

Tone = Literal["good", "warn", "bad"]
STATUS_TONES: dict[str, Tone] = {
    **dict.fromkeys(("ok", "no_change", "applied", "acked", "ready", "healthy"), "good"),
    **dict.fromkeys(("stale", "superseded", "restart_required", "cancelled"), "warn"),
    **dict.fromkeys(("refused", "error", "invalid", "rejected", "timeout", "unhealthy"), "bad"),
}


def hash_display(value: str | None) -> SafeString | str:
    """A token hash or revision (``hex`` or ``algorithm:hex``) as every admin page shows it: the
    algorithm, the first digits and an ellipsis, in monospace, the whole value as its title."""
    if not value:
        return "-"
    algorithm, _, digest = value.rpartition(":")
    prefix = f"{algorithm}:" if algorithm else ""
    shown = digest if len(digest) <= HASH_SHOWN_DIGITS else f"{digest[:HASH_SHOWN_DIGITS]}…"
    return format_html('<code class="iop-hash" title="{}">{}{}</code>', value, prefix, shown)


def status_badge(status: str, tone: Tone | None = None) -> SafeString:
    """``status`` in the colour of its tone: given, or looked up in ``STATUS_TONES`` (a status
    not listed there shows uncoloured rather than guessed)."""
    tone = tone or STATUS_TONES.get(status)
    tone_class = f" iop-status--{tone}" if tone else ""
    return format_html('<span class="iop-status{}">{}</span>', tone_class, status)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Browse, search and filter; nothing is added, changed or deleted here.

    Mirror rows change by editing the config and refreshing; records and usage are never edited.
    """

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    """A mirror inline: shows related rows, edits none."""

    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
