"""`manage.py hash_token`: read a token from stdin, print its sha256 for the config."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from edge.tokens import sha256_hex


class Command(BaseCommand):
    help = "Read a token from standard input and print its sha256 (token_hash_sha256)."
    requires_system_checks: list[str] = []

    def handle(self, *args: Any, **options: Any) -> None:
        token = sys.stdin.readline().strip()
        if not token:
            raise CommandError("no token on standard input (e.g. `hash_token < token-file`)")
        self.stdout.write(sha256_hex(token))
