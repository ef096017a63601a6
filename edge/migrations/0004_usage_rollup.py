"""Usage at scale: the rollups the sums read, and indexes that match the admin's filters.

The single-column indexes of the filtered columns give way to (column, created_at) ones.
They are dropped by name rather than by AlterField, which on SQLite would copy the whole usage
table once per column. The rollups are filled from the rows already stored, with the writer's
own arithmetic.
"""

from django.db import migrations, models

from edge.usage import Usage
from edge.usage_rollup import LATENCY_FIELDS, per_day, rollup

# The columns that had an index of their own (db_index=True) before this migration.
FORMERLY_INDEXED = ("principal_ref", "token_ref", "model", "status")
BACKFILL_CHUNK = 10_000


def drop_single_column_indexes(apps, schema_editor):
    table = apps.get_model("edge", "UsageRecord")._meta.db_table
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    for name, info in constraints.items():
        single = len(info["columns"]) == 1 and info["columns"][0] in FORMERLY_INDEXED
        if single and info["index"] and not info["unique"] and not info["primary_key"]:
            schema_editor.execute(f"DROP INDEX {schema_editor.quote_name(name)}")


def create_single_column_indexes(apps, schema_editor):
    model = apps.get_model("edge", "UsageRecord")
    for column in FORMERLY_INDEXED:
        schema_editor.execute(
            schema_editor._create_index_sql(model, fields=[model._meta.get_field(column)])
        )


def fill_rollups(apps, schema_editor):
    record = apps.get_model("edge", "UsageRecord")
    database = schema_editor.connection.alias
    names = ("created_at", "principal_ref", "token_ref", "model", "status")
    numbers = ("prompt_tokens", "completion_tokens", "total_ms")
    rows = record.objects.using(database).values_list(*names, *numbers).order_by()
    hourly = {}
    chunk = []
    for row in rows.iterator(chunk_size=BACKFILL_CHUNK):
        chunk.append(Usage(request_id="", **dict(zip(names + numbers, row, strict=True))))
        if len(chunk) == BACKFILL_CHUNK:
            _merge(hourly, rollup(chunk))
            chunk = []
    _merge(hourly, rollup(chunk))
    _store(apps.get_model("edge", "UsageRollup"), database, hourly, ("hour", "day"))
    _store(apps.get_model("edge", "UsageDayRollup"), database, per_day(hourly), ("day",))


def _merge(into, sums):
    for key, totals in sums.items():
        if key in into:
            into[key].merge(totals)
        else:
            into[key] = totals


def _store(model, database, sums, time_fields):
    model.objects.using(database).bulk_create(
        (
            model(
                **{name: getattr(key, name) for name in time_fields},
                principal_ref=key.principal_ref,
                token_ref=key.token_ref,
                model=key.model,
                status=key.status,
                requests=totals.requests,
                prompt_tokens=totals.prompt_tokens,
                completion_tokens=totals.completion_tokens,
                **dict(zip(LATENCY_FIELDS, totals.latency, strict=True)),
            )
            for key, totals in sums.items()
        ),
        batch_size=1_000,
    )


def sum_fields():
    """The fields both rollups have (edge.models.UsageSums)."""
    return [
        (
            "id",
            models.BigAutoField(
                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
            ),
        ),
        ("principal_ref", models.CharField(blank=True, max_length=128)),
        ("token_ref", models.CharField(blank=True, max_length=63)),
        ("model", models.CharField(max_length=128)),
        ("status", models.CharField(max_length=64)),
        ("requests", models.PositiveIntegerField(default=0)),
        ("prompt_tokens", models.PositiveBigIntegerField(default=0)),
        ("completion_tokens", models.PositiveBigIntegerField(default=0)),
        *((name, models.PositiveIntegerField(default=0)) for name in LATENCY_FIELDS),
    ]


def unchanged_fields():
    """The formerly indexed fields as they are now: the same, without an index of their own."""
    return {
        "principal_ref": models.CharField(blank=True, max_length=128),
        "token_ref": models.CharField(blank=True, max_length=63),
        "model": models.CharField(max_length=128),
        "status": models.CharField(max_length=64),
    }


class Migration(migrations.Migration):
    dependencies = [
        ("edge", "0003_usage_attempts"),
    ]

    operations = [
        migrations.CreateModel(
            name="UsageRollup",
            fields=[
                *sum_fields(),
                ("hour", models.DateTimeField()),
                ("day", models.DateField(help_text="The UTC day of the hour.")),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("hour", "principal_ref", "token_ref", "model", "status"),
                        name="usage_rollup_key",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="UsageDayRollup",
            fields=[*sum_fields(), ("day", models.DateField())],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("day", "principal_ref", "token_ref", "model", "status"),
                        name="usage_day_rollup_key",
                    )
                ],
            },
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(model_name="usagerecord", name=name, field=field)
                for name, field in unchanged_fields().items()
            ],
            database_operations=[
                migrations.RunPython(drop_single_column_indexes, create_single_column_indexes)
            ],
        ),
        migrations.AddIndex(
            model_name="usagerecord",
            index=models.Index(fields=["request_id"], name="usage_request_id"),
        ),
        *(
            migrations.AddIndex(
                model_name="usagerecord",
                index=models.Index(fields=[name, "created_at"], name=f"usage_{name}_created"),
            )
            for name in ("principal_ref", "token_ref", "model", "provider", "status")
        ),
        migrations.RunPython(fill_rollups, migrations.RunPython.noop),
    ]
