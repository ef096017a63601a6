"""Reading a config file for a management command: every problem in one `CommandError`."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import CommandError

from edge.config import ConfigError, EdgeConfig, load_config_text


def read_config(path: Path) -> tuple[str, EdgeConfig]:
    """The file's text and its validated config; any problem raises CommandError (exit 1)."""
    try:
        text = path.read_text(encoding="utf-8")
        return text, load_config_text(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    except ConfigError as exc:
        count = len(exc.issues)
        lines = [f"{path} is not a valid config ({count} problem{'s' * (count != 1)}):"]
        raise CommandError("\n".join(lines + [str(issue) for issue in exc.issues])) from None
