"""The usage pages' tables as HTML, each built in one pass.

The admin's own per-cell rendering (`items_for_result`), or a template loop, costs several times
the page's queries, and these are the pages a browsing operator reloads; the Edge's event loop
waits while a page holds the interpreter. The rows table keeps the admin's markup (its table id
and classes, so its styles and the filters' layout hold).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from edge.admin_mixins import STATUS_TONES, status_badge
from edge.models import UsageRecord
from edge.usage_rollup import NOT_ERRORS
from edge.usage_tables import Table

# (class suffix, header); the model cell marks long-context runs, the provider cell failovers.
COLUMNS = (
    ("created_at", "time (UTC)"),
    ("principal_ref", "principal_ref"),
    ("token_ref", "token_ref"),
    ("model", "model"),
    ("provider", "provider"),
    ("node", "node"),
    ("prompt_tokens", "prompt"),
    ("completion_tokens", "completion"),
    ("queue_ms", "queue ms"),
    ("total_ms", "total ms"),
    ("status", "status"),
)
_ROW = (
    '<tr><th class="field-created_at"><a href="{}{}/change/">{}</a></th>'
    + "".join(f'<td class="field-{name}">{{}}</td>' for name, _ in COLUMNS[1:])
    + "</tr>"
)


def rows_table(rows: Iterable[UsageRecord]) -> SafeString:
    change_base = reverse("admin:edge_usagerecord_changelist")
    head = format_html_join(
        "",
        '<th scope="col" class="column-{}"><div class="text"><span>{}</span></div></th>',
        COLUMNS,
    )
    body = format_html_join(
        "\n",
        _ROW,
        (
            (
                change_base,
                row.pk,
                f"{row.created_at.astimezone(UTC):%Y-%m-%d %H:%M:%S}",
                row.principal_ref,
                row.token_ref,
                model_cell(row.model, row.context_class),
                provider_cell(row.provider, row.attempts),
                row.node,
                f"{row.prompt_tokens:,}",
                f"{row.completion_tokens:,}",
                f"{row.queue_ms:,.1f}",
                f"{row.total_ms:,.1f}",
                usage_status(row.status),
            )
            for row in rows
        ),
    )
    return format_html(
        '<div class="results"><table id="result_list" class="usage-rows"><thead><tr>{}</tr>'
        "</thead><tbody>{}</tbody></table></div>",
        head,
        body,
    )


def model_cell(model: str, context_class: str) -> SafeString | str:
    if context_class != "long":
        return model
    return format_html(
        '{} <span class="usage-tag" title="long-context admission">long</span>', model
    )


def provider_cell(provider: str, attempts: int) -> SafeString | str:
    if attempts <= 1:
        return provider
    return format_html(
        '{} <span class="usage-tag" title="providers tried (failover)">{} attempts</span>',
        provider,
        attempts,
    )


def usage_status(status: str) -> SafeString:
    """A usage status in colour: ok good, cancelled a warning, any other an error."""
    return status_badge(
        status, STATUS_TONES.get(status) or (None if status in NOT_ERRORS else "bad")
    )


def sums_table(table: Table) -> SafeString:
    """One sums table: its keys (each a link narrowing the sums), numbers, and the total."""
    head = format_html_join("", '<th scope="col">{}</th>', ((h,) for h in table.key_headers))
    head += format_html_join(
        "", '<th scope="col" class="number">{}</th>', ((h,) for h in table.number_headers)
    )
    body = format_html_join(
        "\n",
        "<tr>{}{}</tr>",
        (
            (
                format_html_join(
                    "",
                    "<td>{}</td>",
                    (
                        (
                            format_html('<a href="?{}">{}</a>', c.query, c.text)
                            if c.query
                            else c.text,
                        )
                        for c in row.keys
                    ),
                ),
                _numbers(row.numbers),
            )
            for row in table.rows
        ),
    )
    total = format_html_join("", "<td>{}</td>", ((text,) for text in table.total_keys))
    return format_html(
        '<table id="{}"><caption>{}</caption><thead><tr>{}</tr></thead><tbody>{}</tbody>'
        "<tfoot><tr>{}{}</tr></tfoot></table>",
        table.id,
        table.caption,
        head,
        body,
        total,
        _numbers(table.total_numbers),
    )


def _numbers(texts: Iterable[str]) -> SafeString:
    return format_html_join("", '<td class="number">{}</td>', ((text,) for text in texts))
