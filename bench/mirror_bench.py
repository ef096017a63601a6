"""Mirror sync benchmark: `import_config` of a generated fleet (N nodes, 10 providers each).

Measures the first import into an empty mirror, a sync of one change (one provider's capacity),
every row compared or only the delta from the config the mirror holds (`base=`, as a refresh
passes it), a re-import of the active revision (no change) and a change of every provider's
capacity (by delta: one that names every node), on the database in DATABASE_URL:
a throwaway database is created beside it (`iop_edge_mirror_bench` on PostgreSQL) and dropped at
the end; without DATABASE_URL, a SQLite file in a temporary directory. Parsing the config is not
measured. The last line printed is one JSON object.

    python bench/mirror_bench.py [--nodes N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable

import django
from fleet_config import fleet_yaml, one_change

BENCH_DATABASE = "iop_edge_mirror_bench"


def timed(step: Callable[[], object]) -> float:
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def empty_mirror() -> None:
    """Every table emptied (TRUNCATE on PostgreSQL): no dead rows left to slow the next round."""
    from django.core.management import call_command

    call_command("flush", interactive=False, verbosity=0)


def measure(nodes: int, rounds: int) -> dict[str, float]:
    from edge.config import EdgeConfig, load_config_text
    from edge.config.sharing import sharing_unchanged
    from edge.mirror import import_config

    texts = [fleet_yaml(nodes), one_change(fleet_yaml(nodes)), fleet_yaml(nodes, capacity=5)]
    configs = [load_config_text(text) for text in texts]
    # As a refresh holds them: the candidate shares its unchanged nodes and models.
    configs[1] = sharing_unchanged(configs[1], configs[0])

    def run(
        which: int, base: EdgeConfig | None = None, dry_run: bool = False
    ) -> Callable[[], object]:
        return lambda: import_config(
            configs[which], texts[which], source="mirror bench", dry_run=dry_run, base=base
        )

    first, changed, delta, delta_dry_run, unchanged, fleet_wide = [], [], [], [], [], []
    for _ in range(rounds):
        empty_mirror()
        first.append(timed(run(0)))
        # Back and forth between the two configs: each import is one change.
        changed += [timed(run(1)), timed(run(0))]
        delta += [timed(run(1, base=configs[0])), timed(run(0, base=configs[1]))]
        # The same without writing the new revision's YAML: the mirror's part alone.
        delta_dry_run.append(timed(run(1, base=configs[0], dry_run=True)))
        unchanged.append(timed(run(0)))
        # Every provider's capacity: a delta that names every node, and back.
        fleet_wide += [timed(run(2, base=configs[0])), timed(run(0, base=configs[2]))]
    for base in (None, configs[0]):
        report = import_config(configs[1], texts[1], source="mirror bench", dry_run=True, base=base)
        assert len(report.updated) == 1 and not report.created and not report.deleted, (
            report.lines()
        )
    return {
        "first_import_s": min(first),
        "one_change_s": min(changed),
        "one_change_delta_s": min(delta),
        "one_change_delta_dry_run_s": min(delta_dry_run),
        "no_change_s": min(unchanged),
        "fleet_change_s": min(fleet_wide),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="nodes in the fleet (default 1000)")
    parser.add_argument("--quick", action="store_true", help="one round instead of three")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iop_site.settings")
        os.environ.setdefault("IOP_GENERATE_SECRET_KEY", "true")
        os.environ["IOP_VAR_DIR"] = tmp  # a generated SECRET_KEY lands here, not in var/
        os.environ.setdefault("DATABASE_URL", f"sqlite:///{tmp}/unused.sqlite3")
        django.setup()
        from django.db import connection

        vendor = connection.vendor
        # The test-database machinery creates (and migrates) a database of its own, so the one
        # DATABASE_URL names is never written to.
        connection.settings_dict["TEST"]["NAME"] = (
            f"{tmp}/{BENCH_DATABASE}.sqlite3" if vendor == "sqlite" else BENCH_DATABASE
        )
        original = connection.settings_dict["NAME"]
        connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
        try:
            figures = measure(args.nodes, 1 if args.quick else 3)
        finally:
            connection.creation.destroy_test_db(original, verbosity=0)

    print(f"mirror sync, {args.nodes} nodes of 10 providers, {vendor}")
    print(f"{'first import':<24}{figures['first_import_s'] * 1000:>10.0f} ms")
    print(f"{'one change':<24}{figures['one_change_s'] * 1000:>10.0f} ms")
    print(f"{'one change, delta':<24}{figures['one_change_delta_s'] * 1000:>10.1f} ms")
    print(f"{'  the same, dry run':<24}{figures['one_change_delta_dry_run_s'] * 1000:>10.1f} ms")
    print(f"{'no change':<24}{figures['no_change_s'] * 1000:>10.0f} ms")
    print(f"{'every provider changed':<24}{figures['fleet_change_s'] * 1000:>10.0f} ms")
    print(
        json.dumps(
            {
                "bench": "mirror",
                "database": vendor,
                "nodes": args.nodes,
                **{name: round(value, 4) for name, value in figures.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
