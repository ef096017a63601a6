"""`manage.py bootstrap_edge`: generate the untracked tokens and the config `make run` serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from edge.bootstrap import bootstrap
from edge.config import ConfigError


class Command(BaseCommand):
    help = "Generate Node and client tokens for placeholder hashes and write the config to serve."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--source", default="configs/edge.yaml", help="tracked config")
        parser.add_argument("--output", default=str(settings.VAR_DIR / "edge.yaml"))

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = bootstrap(Path(options["source"]), Path(options["output"]), Path.cwd())
        except ConfigError as exc:
            raise CommandError(f"{options['source']} is not a valid config:\n{exc}") from None
        except OSError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"config to serve: {result.config_path} ({result.config.revision})")
        for node_id, path in result.node_env_files.items():
            self.stdout.write(f"node {node_id}: token in {path}")
        for token_ref, path in result.client_token_files.items():
            token = result.new_client_tokens.get(token_ref)
            shown = f"{token} (shown once; kept in {path})" if token else f"in {path}"
            self.stdout.write(f"client token {token_ref}: {shown}")
