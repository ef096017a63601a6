"""`manage.py refresh`: dry-run or apply a config refresh on the running Edge, plan style.

Thin: read the options and the operator token, POST to the Edge's loopback `/refresh` (the same
`run_refresh` the admin uses), print the plan and exit with a code a script can act on.
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from edge.config import ConfigError
from edge.config.formats import listen_host
from edge.config.yaml_source import parse_yaml
from edge.operator_api.token import OperatorTokenError, operator_token_file, read_operator_token
from refresh.actor import OS_USER_HEADER, current_os_user
from refresh.models import MAX_REASON_CHARS
from refresh.plan import SUCCESSES
from refresh.report import plan_lines

# A refresh waits for Node acks (IOP_REFRESH_ACK_TIMEOUT_S) before it answers.
TIMEOUT_S = 60.0
EXIT_FAILED = 1
EXIT_RESTART_REQUIRED = 2
PUSH_WARNINGS = {
    "rejected": "rejected its new config and keeps serving the previous one",
    "timeout": "did not ack in time; check it in admin (Nodes: last acked revision)",
    "not_connected": "is not connected; it gets the new config when it connects",
}


class Command(BaseCommand):
    help = (
        "Dry-run (default) or apply (--apply) a config refresh on the running Edge and print the "
        "plan. Exit status: 0 no change, dry run ok or applied; 2 restart required (nothing "
        "changed); 1 invalid, stale or any other failure, such as an unreachable Edge."
    )
    requires_system_checks: list[str] = []

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        argparse_error = parser.error

        def error(message: str) -> None:
            # argparse exits 2 on a usage error, and 2 means "restart required" here.
            try:
                argparse_error(message)
            except SystemExit as exc:
                raise SystemExit(EXIT_FAILED) from exc

        parser.error = error  # type: ignore[method-assign]
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--apply", action="store_true", help="apply the plan (default: dry run only)"
        )
        parser.add_argument(
            "--file",
            metavar="PATH",
            help="send this file as the candidate config (default: the Edge re-reads its own file)",
        )
        parser.add_argument(
            "--base-revision",
            metavar="REV",
            help="refuse as stale unless the Edge still runs REV (the base of a reviewed dry run)",
        )
        parser.add_argument(
            "--candidate-revision",
            metavar="REV",
            help="refuse as stale unless the candidate is still REV (what a dry run reviewed)",
        )
        parser.add_argument(
            "--url",
            help="the refresh endpoint (default: http://<edge.admin_listen>/refresh from --config)",
        )
        parser.add_argument(
            "--config",
            metavar="PATH",
            default=settings.IOP_CONFIG,
            help="the Edge's config file, read for edge.admin_listen (default: IOP_CONFIG)",
        )
        parser.add_argument(
            "--token-file",
            metavar="PATH",
            default=str(operator_token_file()),
            help="the operator token the Edge created (default: IOP_OPERATOR_TOKEN_FILE)",
        )
        parser.add_argument(
            "--reason",
            metavar="TEXT",
            help=f"why, kept on the refresh record (up to {MAX_REASON_CHARS} characters)",
        )
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        logging.getLogger("httpx").setLevel(logging.WARNING)  # no per-request INFO line
        url = options["url"] or operator_url(Path(options["config"]))
        try:
            token = read_operator_token(Path(options["token_file"]))
        except OperatorTokenError as exc:
            raise CommandError(
                f"{exc}. The Edge creates it on its first start; point --token-file (or "
                "IOP_OPERATOR_TOKEN_FILE, IOP_VAR_DIR) at the running Edge's file"
            ) from None
        body: dict[str, Any] = {"mode": "apply" if options["apply"] else "dry_run"}
        if options["file"]:
            body["config_yaml"] = read_text(Path(options["file"]))
        for key in ("base_revision", "candidate_revision", "reason"):
            if options[key]:
                body[key] = options[key]
        result = post_refresh(url, token, body, as_json=options["json"], stdout=self.stdout)
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=2, ensure_ascii=False))
        else:
            mode = "apply" if options["apply"] else "dry run"
            self.stdout.write(f"Refresh {result['refresh_id']} ({mode}) via {url}")
            for line in plan_lines(result):
                self.stdout.write(line)
            if result["status"] == "ok":
                self.stdout.write(f"Apply it with: {apply_command(options, result)}")
            for push in result["node_pushes"]:
                warning = PUSH_WARNINGS.get(push["status"])
                if warning:
                    self.stderr.write(f"warning: node {push['node']} {warning}")
        sys.exit(exit_code(result["status"]))


def exit_code(status: str) -> int:
    """0 when the refresh went (or would go) through; any status this CLI does not know fails."""
    if status in SUCCESSES:
        return 0
    return EXIT_RESTART_REQUIRED if status == "restart_required" else EXIT_FAILED


def operator_url(config_path: Path) -> str:
    """`http://<edge.admin_listen>/refresh`, read from the config without validating it all.

    The file may be the very candidate that is invalid; the Edge should be the one to say so.
    """
    try:
        data = parse_yaml(read_text(config_path))
        listen = data["edge"]["admin_listen"]
        host, port = listen_host(listen), listen.rpartition(":")[2]
    except (ConfigError, KeyError, TypeError, AttributeError) as exc:
        raise CommandError(
            f"cannot read edge.admin_listen from {config_path} ({exc}); pass --url"
        ) from None
    return f"http://[{host}]:{port}/refresh" if ":" in host else f"http://{host}:{port}/refresh"


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise CommandError(f"{path} is not UTF-8 text ({exc.reason})") from None


def post_refresh(
    url: str, token: str, body: dict[str, Any], *, as_json: bool, stdout: Any
) -> dict[str, Any]:
    """The refresh result; any other answer becomes a CommandError (exit 1) naming the URL."""
    headers = {"Authorization": f"Bearer {token}", "X-Request-Id": f"cli-{uuid.uuid4().hex[:16]}"}
    os_user = current_os_user()
    if os_user:
        headers[OS_USER_HEADER] = os_user  # who ran the command, for the record
    try:
        response = httpx.post(url, json=body, headers=headers, timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise CommandError(
            f"cannot reach the Edge at {url}: {exc or type(exc).__name__}. Is it running? "
            "(--url or --config point the command at another Edge)"
        ) from None
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if isinstance(answer, dict) and "status" in answer and "refresh_id" in answer:
        return answer
    if as_json and answer is not None:
        stdout.write(json.dumps(answer, indent=2, ensure_ascii=False))
    raise CommandError(
        f"the Edge at {url} answered HTTP {response.status_code}: {describe(answer, response)}"
    )


def describe(answer: Any, response: httpx.Response) -> str:
    if isinstance(answer, dict):
        if "detail" in answer:
            return str(answer["detail"])
        return "; ".join(
            f"{field}: {' '.join(map(str, errs)) if isinstance(errs, list) else errs}"
            for field, errs in answer.items()
        )
    return response.text[:200] or response.reason_phrase


def apply_command(options: dict[str, Any], result: dict[str, Any]) -> str:
    parts = ["python manage.py refresh --apply"]
    if options["file"]:
        parts.append(f"--file {options['file']}")
    if options["url"]:
        parts.append(f"--url {options['url']}")
    elif options["config"] != settings.IOP_CONFIG:
        parts.append(f"--config {options['config']}")
    if options["token_file"] != str(operator_token_file()):
        parts.append(f"--token-file {options['token_file']}")
    parts.append(f"--base-revision {result['base_revision']}")
    parts.append(f"--candidate-revision {result['candidate_revision']}")
    return " ".join(parts)
