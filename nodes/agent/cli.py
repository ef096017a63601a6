"""``python -m nodes.agent``: parse flags, find the token, run the agent until SIGTERM/SIGINT.

The token never comes from the command line (other local users can read a process's argv):
``IOP_NODE_TOKEN`` or ``--token-file``. Usage errors exit 2, a clean stop exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence

import uvloop
from websockets.exceptions import InvalidURI
from websockets.uri import parse_uri

from nodes.agent.agent import AgentSettings, Backoff, NodeAgent
from nodes.agent.env_access import ALLOWED_ENV, DEFAULT_SUFFIX, TOKEN_ENV, allowed_names
from nodes.agent.session import AGENT_VERSION
from nodes.wire.collector import tune_for_serving

EXIT_USAGE = 2


class UsageError(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nodes.agent",
        description="IOP Node agent: connects out to an IOP Edge and serves its runs.",
        epilog=f"The node token is read from ${TOKEN_ENV} or --token-file, never from a flag.",
        # Without this, "--token X" would silently be taken as "--token-file X".
        allow_abbrev=False,
    )
    parser.add_argument(
        "--edge",
        required=True,
        action="append",
        metavar="URL",
        help="Edge websocket URL, e.g. ws://HOST:PORT/ws/node/; repeat it for the Edges of an HA "
        "cluster: the Node tries them in turn and serves the one that leads",
    )
    parser.add_argument("--node-id", required=True, help="this node's id in the Edge config")
    parser.add_argument("--token-file", help=f"file holding the node token (else ${TOKEN_ENV})")
    parser.add_argument(
        "--allow-env",
        action="append",
        default=[],
        metavar="NAME",
        help=f"an environment variable the Edge's config may name as an adapter's api_key_env "
        f"(repeatable; also ${ALLOWED_ENV}, comma-separated). Names ending in {DEFAULT_SUFFIX} "
        f"that do not start with IOP_ are allowed without it; {TOKEN_ENV} never is",
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long running runs may take to finish (default 30)",
    )
    parser.add_argument(
        "--max-backoff",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="longest wait between reconnect attempts (default 30)",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    parser.add_argument("--version", action="version", version=f"iop-node-agent {AGENT_VERSION}")
    return parser


def parse_settings(
    argv: Sequence[str], environ: Mapping[str, str]
) -> tuple[AgentSettings, argparse.Namespace]:
    if any(arg == "--token" or arg.startswith("--token=") for arg in argv):
        raise UsageError(
            f"--token is not accepted: command lines are visible to other users; "
            f"set {TOKEN_ENV} or pass --token-file PATH"
        )
    args = build_parser().parse_args(argv)
    for url in args.edge:
        try:
            parse_uri(url)
        except InvalidURI as exc:
            raise UsageError(f"--edge: {exc}") from None
    if len(set(args.edge)) != len(args.edge):
        raise UsageError("--edge: each URL once (a URL is given twice)")
    if not args.node_id.strip():
        raise UsageError("--node-id must not be empty")
    if args.drain_timeout < 0:
        raise UsageError("--drain-timeout must be >= 0")
    if args.max_backoff <= 0:
        raise UsageError("--max-backoff must be > 0")
    try:
        allowed_env = allowed_names(args.allow_env, environ)
    except ValueError as exc:
        raise UsageError(f"--allow-env / {ALLOWED_ENV}: {exc}") from None
    settings = AgentSettings(
        edge_url=args.edge[0],
        other_edge_urls=tuple(args.edge[1:]),
        node_id=args.node_id,
        token=read_token(args.token_file, environ),
        drain_timeout_s=args.drain_timeout,
        allowed_env=allowed_env,
        environ=environ,
    )
    return settings, args


def read_token(token_file: str | None, environ: Mapping[str, str]) -> str:
    """The token from ``--token-file`` if given, else from the environment."""
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as handle:
                token = handle.read().strip()
        except OSError as exc:
            raise UsageError(f"--token-file: cannot read {token_file}: {exc.strerror}") from None
        if not token:
            raise UsageError(f"--token-file: {token_file} is empty")
    else:
        token = environ.get(TOKEN_ENV, "").strip()
        if not token:
            raise UsageError(f"no node token: set {TOKEN_ENV} or pass --token-file PATH")
    if any(ch in token for ch in "\r\n\0"):
        raise UsageError("the node token must be a single line")
    return token


async def run_agent(agent: NodeAgent) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, agent.request_stop)
    await agent.run()


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    try:
        settings, args = parse_settings(
            sys.argv[1:] if argv is None else argv, os.environ if environ is None else environ
        )
    except UsageError as exc:
        print(f"python -m nodes.agent: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # The websockets library logs handshake headers at DEBUG, the node's bearer token included.
    logging.getLogger("websockets").setLevel(max(logging.INFO, logging.getLogger().level))
    # uvloop: the same agent in about a tenth less CPU per streamed token (docs/benchmarks.md).
    logging.getLogger("nodes.agent").debug("event loop: uvloop %s", uvloop.__version__)
    tune_for_serving()
    uvloop.run(run_agent(NodeAgent(settings, backoff=Backoff(cap_s=args.max_backoff))))
    return 0
