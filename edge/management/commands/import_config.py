"""`manage.py import_config PATH [--dry-run]`: sync the database mirror to a config file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from edge.management.config_file import read_config
from edge.mirror import import_config


class Command(BaseCommand):
    help = "Import an Edge config into the database mirror and make its revision active."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="the YAML config file to import")
        parser.add_argument(
            "--dry-run", action="store_true", help="show what would change and write nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["path"])
        text, config = read_config(path)
        dry_run = options["dry_run"]
        report = import_config(config, text, source=f"import_config {path}", dry_run=dry_run)
        for line in report.lines():
            self.stdout.write(line)
        verb = "would" if dry_run else "did"
        if not report.changed:
            self.stdout.write(f"nothing changed: {config.revision} is already active")
        elif report.revision_activated:
            self.stdout.write(f"revision {config.revision} {verb} become active")
        counts = f"{len(report.created)} created, {len(report.updated)} updated, "
        counts += f"{len(report.deleted)} deleted"
        self.stdout.write(("dry run: " if dry_run else "") + counts)
