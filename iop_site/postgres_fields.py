"""Django's PostgreSQL model fields, imported only where the database is PostgreSQL.

Django REST framework imports ``django.contrib.postgres.fields`` whenever it can, to map those
fields in its model serializers, and that module imports psycopg: about 10 MB of every Edge's
memory (86.5 against 96.0 MB for Django, DRF and daphne imported; docs/benchmarks.md). On any
other database no model can have such a field, so the import is refused there and DRF goes
without, as it does on a machine without psycopg.
"""

from __future__ import annotations

import sys

POSTGRES_FIELDS = "django.contrib.postgres.fields"
POSTGRES_ENGINE = "django.db.backends.postgresql"


def import_only_for_postgres(engine: str) -> None:
    """Refuse the import of Django's PostgreSQL fields unless ``engine`` is PostgreSQL's."""
    if engine != POSTGRES_ENGINE:
        # A None entry makes the import raise ImportError (the import system's own rule);
        # already imported, it stays.
        sys.modules.setdefault(POSTGRES_FIELDS, None)  # type: ignore[arg-type]
