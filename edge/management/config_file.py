"""Reading a config file for a management command: every error on stderr, then exit 1."""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import OutputWrapper

from edge.config import ConfigError, EdgeConfig, load_config_text


def read_config_or_exit(path: Path, stderr: OutputWrapper) -> tuple[str, EdgeConfig]:
    """The file's text and its validated config; on any problem, print it and exit 1."""
    try:
        text = path.read_text(encoding="utf-8")
        return text, load_config_text(text)
    except (OSError, UnicodeDecodeError) as exc:
        stderr.write(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}")
    except ConfigError as exc:
        for issue in exc.issues:
            stderr.write(str(issue))
    sys.exit(1)
