"""Fill the usage table with synthetic rows for benchmarks, and the rollup with their sums.

Rows spread over the last ``--days`` days, oldest first (as the writer would have stored them):
8 principals with 3 tokens each, every token on 1 to 3 of 6 models, 2 providers per model,
mostly `ok` with a few errors and cancellations, latencies around a second. The database is the
one Django's settings name (DATABASE_URL), migrated already; ``--replace`` empties the usage
tables first. Rows go in through the usage writer's own batch write (rows and rollup in one
transaction), on PostgreSQL with COPY for the rows.

    DATABASE_URL=… python bench/load_usage.py --rows 1000000 [--days 30] [--replace]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import django

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BATCH = 10_000
PRINCIPALS = [f"team-{name}" for name in "abcdefgh"]
MODELS = ["llama-70b", "llama-8b", "qwen-32b", "mistral-7b", "embed-small", "gpt-cloud"]
STATUSES = [
    ("ok", 0.965),
    ("cancelled", 0.01),
    ("upstream_error", 0.01),
    ("deadline_exceeded", 0.005),
    ("rate_limited", 0.005),
    ("model_not_found", 0.005),
]


def synthetic_usage(rows: int, days: float, seed: int = 13) -> Iterator[list]:
    """Batches of `edge.usage.Usage`, oldest first, ending now."""
    from edge.usage import Usage

    rng = random.Random(seed)
    tokens = [
        (principal, f"{principal}-app-{index}", rng.sample(MODELS, rng.randint(1, 3)))
        for principal in PRINCIPALS
        for index in range(1, 4)
    ]
    weights = [rng.paretovariate(1.2) for _ in tokens]  # a few tokens carry most traffic
    statuses, status_weights = zip(*STATUSES, strict=True)
    end = datetime.now(UTC)
    step = timedelta(days=days) / rows
    start = end - step * rows
    batch: list[Usage] = []
    for index in range(rows):
        principal, token_ref, models = rng.choices(tokens, weights)[0]
        model = rng.choice(models)
        status = rng.choices(statuses, status_weights)[0]
        ok = status == "ok"
        batch.append(
            Usage(
                request_id=f"{rng.getrandbits(96):024x}",
                model=model,
                status=status,
                principal_ref=principal,
                token_ref=token_ref,
                provider=f"{model}-{rng.randint(1, 2)}" if status != "model_not_found" else "",
                node=f"gpu-{rng.randint(1, 4)}",
                context_class="long" if rng.random() < 0.03 else "normal",
                prompt_tokens=int(rng.lognormvariate(6, 1)) if ok else 0,
                completion_tokens=int(rng.lognormvariate(5, 1)) if ok else 0,
                queue_ms=rng.expovariate(1 / 5),
                total_ms=rng.lognormvariate(6.7, 0.8),
                attempts=1,
                providers_tried=f"{model}-1",
                created_at=start + step * index,
            )
        )
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def write_with_copy(batch: list) -> None:
    """`write_batch` with the rows sent by COPY (PostgreSQL): several times faster in bulk."""
    from django.db import connection, transaction

    from edge.models import UsageRecord
    from edge.usage import Usage
    from edge.usage_store import add_to_rollup

    quote = connection.ops.quote_name
    fields = {field.name: field.column for field in UsageRecord._meta.concrete_fields}
    columns = ", ".join(quote(fields[name]) for name in Usage.__slots__)
    with transaction.atomic(), connection.cursor() as cursor:
        sql = f"COPY {quote(UsageRecord._meta.db_table)} ({columns}) FROM STDIN"
        with cursor.cursor.copy(sql) as copy:
            for usage in batch:
                copy.write_row(tuple(getattr(usage, name) for name in Usage.__slots__))
        add_to_rollup(cursor, batch)


def load(rows: int, days: float, replace: bool) -> float:
    """Load ``rows`` rows; the seconds it took."""
    from django.db import connection

    from edge.models import UsageRecord, UsageRollup
    from edge.usage_store import write_batch

    if replace:
        UsageRecord.objects.all().delete()
        UsageRollup.objects.all().delete()
    write = write_with_copy if connection.vendor == "postgresql" else write_batch
    started = time.perf_counter()
    for batch in synthetic_usage(rows, days):
        write(batch)
    with connection.cursor() as cursor:
        # Fresh statistics, as autovacuum (PostgreSQL) or `PRAGMA optimize` would leave them.
        cursor.execute("ANALYZE")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--replace", action="store_true", help="empty the usage tables first")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iop_site.settings")
    django.setup()
    from django.db import connection

    seconds = load(args.rows, args.days, args.replace)
    print(f"loaded {args.rows:,} usage rows into {connection.vendor} in {seconds:.1f} s")


if __name__ == "__main__":
    main()
