"""`manage.py check_config PATH`: validate an Edge config file and print its revision."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from edge.management.config_file import read_config


class Command(BaseCommand):
    help = "Validate an Edge config: print its revision (exit 0) or every error (exit 1)."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="the YAML config file to check")

    def handle(self, *args: Any, **options: Any) -> None:
        _, config = read_config(Path(options["path"]))
        self.stdout.write(f"revision {config.revision}")
        self.stdout.write(f"valid: {config.summary()}")
