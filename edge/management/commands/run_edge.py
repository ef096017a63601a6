"""`manage.py run_edge [--config PATH] [--listen HOST:PORT] [--admin-listen HOST:PORT]`: serve the
Edge's listeners from one process; with `edge.ha`, as the leader or a standby."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from edge.config import EdgeConfig
from edge.config.overrides import BoundListeners, ListenOverrideError, bound_listeners
from edge.ha.cluster import RunningElector, ha_database_problem, start_elector
from edge.management.config_file import read_config
from edge.operator_api.token import (
    OperatorTokenError,
    operator_token_digest,
    operator_token_file,
)
from edge.ports import raise_open_files_limit
from edge.runtime import EdgeRuntime
from edge.startup import start_runtime
from iop_site.listeners import daphne_endpoint
from nodes import wire
from refresh.plan_worker import PLAN_WORKER, WARM_FROM_CHARS
from refresh.start import import_at_start

if TYPE_CHECKING:
    from iop_site.uvicorn_listener import OpenAIListener

log = logging.getLogger("edge.run")

SWITCH_INTERVAL_S = 0.0005
# Above the wire's own frame limit, so an oversized frame gets the Edge's error frame.
WEBSOCKET_MAX_MESSAGE_BYTES = wire.MAX_SOCKET_MESSAGE_BYTES


class Command(BaseCommand):
    help = "Serve the Edge: edge.listen, the loopback admin_listen and openai.listen if set."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--config", default=settings.IOP_CONFIG, help="Edge config file (default: IOP_CONFIG)"
        )
        parser.add_argument(
            "--listen", metavar="HOST:PORT", help="public listener, over edge.listen"
        )
        parser.add_argument(
            "--admin-listen",
            metavar="HOST:PORT",
            help="operator listener (loopback), over edge.admin_listen",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["config"])
        text, config = read_config(path)
        if problem := ha_database_problem(config):
            raise CommandError(problem)
        try:
            bound = bound_listeners(config, options["listen"], options["admin_listen"])
        except ListenOverrideError as exc:
            raise CommandError(str(exc)) from None
        if config.edge.ha:
            # The cluster's config is in the database: the Edge that takes the lock reads it
            # there (edge.ha.cluster), and a standby's file, maybe stale, imports nothing.
            self.stdout.write(f"edge.ha: Edge {config.edge.id} starts as a standby")
        else:
            report = import_at_start(config, text, path)  # a changed config leaves a record
            if report.changed:
                lines = len(report.lines())
                self.stdout.write(f"mirror synced to {config.revision} ({lines} changes)")
        try:
            operator_token_digest(operator_token_file())  # created on the first start
        except OperatorTokenError as exc:
            raise CommandError(str(exc)) from None
        self._serve(path, config, bound, text)

    def _serve(self, path: Path, config: EdgeConfig, bound: BoundListeners, text: str) -> None:
        # daphne.server installs Twisted's asyncio reactor on import: import it only here.
        from daphne.server import Server
        from twisted.internet import defer, reactor

        from iop_site import (
            autobahn_debug_args,
            daphne_http_module,
            daphne_input_queue,
            daphne_reaping,
            daphne_tuning,
        )
        from iop_site.asgi import application

        electors: list[RunningElector] = []  # held for the process's life

        daphne_tuning.install()
        daphne_reaping.install()
        daphne_http_module.install()
        daphne_input_queue.install()
        autobahn_debug_args.install()
        log.info("open files limit: %d", raise_open_files_limit())
        # The event loop gives the interpreter up at every system call (each socket read and
        # write) and waits for it again behind any busy thread (a refresh's plan, the database):
        # up to the switch interval each time, 5 ms by default, which over a fleet's sockets
        # added up to stalls of a second. A shorter interval bounds each wait.
        sys.setswitchinterval(SWITCH_INTERVAL_S)

        openai_listener = _openai_listener(config, application)
        runtime = start_runtime(config, path, bound)
        if not config.edge.ha and len(text) >= WARM_FROM_CHARS:
            # A fleet's first refresh would wait seconds for the worker to start and load the
            # running config; it does both now, at low priority (a standby's config is the
            # cluster's, read when it leads).
            PLAN_WORKER.warm(runtime.config, text)
        config = runtime.config  # with the listeners it serves on
        listens = [config.edge.listen, config.edge.admin_listen]
        if config.openai.listen and openai_listener is None:
            listens.append(config.openai.listen)

        def ready() -> None:
            role = "as a standby, seeking the leader lock" if config.edge.ha else "as the leader"
            self.stdout.write(f"IOP Edge {config.edge.id} serving {config.revision} {role}")
            self.stdout.write(f"  public   http://{config.edge.listen}/ (admin UI /admin/)")
            openai = config.openai.listen or config.edge.listen
            served_by = " (uvicorn)" if openai_listener is not None else ""
            self.stdout.write(f"  openai   http://{openai}/v1/{served_by}")
            self.stdout.write(f"  nodes    ws://{config.edge.listen}/ws/node/")
            self.stdout.write(
                f"  operator http://{config.edge.admin_listen}/refresh (loopback; token in "
                f"{operator_token_file()})"
            )
            self.stdout.flush()

        def flush_records() -> defer.Deferred:
            return defer.Deferred.fromFuture(asyncio.ensure_future(_flush_records(runtime)))

        # Twisted declares the interface method without `self`, so mypy shifts its arguments.
        reactor.addSystemEventTrigger("before", "shutdown", flush_records)  # type: ignore[arg-type]
        reactor.callWhenRunning(_drain_on_signals, runtime, reactor, openai_listener)
        loop = reactor._asyncioEventloop  # the asyncio loop Twisted's reactor runs on
        if openai_listener is not None:
            reactor.callWhenRunning(_start_openai_listener, openai_listener, loop, reactor)
        if config.edge.ha:
            reactor.callWhenRunning(lambda: electors.append(start_elector(runtime, loop)))
        Server(
            application=application,
            endpoints=[daphne_endpoint(listen) for listen in listens],
            signal_handlers=False,  # SIGTERM and SIGINT drain instead (_drain_on_signals)
            action_logger=None,
            websocket_max_message_size=WEBSOCKET_MAX_MESSAGE_BYTES,
            websocket_max_frame_size=WEBSOCKET_MAX_MESSAGE_BYTES,
            ready_callable=ready,
            verbosity=0,
        ).run()


def _openai_listener(config: EdgeConfig, application: Any) -> OpenAIListener | None:
    """uvicorn for `openai.listen` (`openai.server: uvicorn`), its socket bound already."""
    if config.openai.server != "uvicorn" or not config.openai.listen:
        return None
    from iop_site.uvicorn_listener import OpenAIListener, OpenAIListenerError, bind

    try:
        return OpenAIListener(application, bind(config.openai.listen))
    except OpenAIListenerError as exc:
        raise CommandError(str(exc)) from None


def _start_openai_listener(listener: OpenAIListener, loop: Any, reactor: Any) -> None:
    def started(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("openai.listen (uvicorn) failed to start: %s", error)
            reactor.stop()

    loop.create_task(listener.start()).add_done_callback(started)


def _drain_on_signals(
    runtime: EdgeRuntime, reactor: Any, openai_listener: OpenAIListener | None
) -> None:
    """SIGTERM or SIGINT drains the Edge, then stops the reactor (docs/operations.md)."""
    loop = reactor._asyncioEventloop  # the asyncio loop Twisted's reactor runs on
    stopping: list[asyncio.Task[None]] = []

    def on_signal(signum: signal.Signals) -> None:
        if stopping:
            log.info("%s: already stopping", signum.name)
            return
        log.info("%s: stopping", signum.name)
        stopping.append(loop.create_task(_drain_and_stop(runtime, reactor, openai_listener)))

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)


async def _drain_and_stop(
    runtime: EdgeRuntime, reactor: Any, openai_listener: OpenAIListener | None
) -> None:
    from twisted.internet.interfaces import IListeningPort

    try:
        await runtime.drain_requests(settings.IOP_DRAIN_TIMEOUT_S)
        # No new connections from here on: a Node reconnecting now would only be cut off.
        for reader in reactor.getReaders():
            if IListeningPort.providedBy(reader):
                reader.stopListening()
        if openai_listener is not None:
            openai_listener.stop_listening()
        await runtime.close_node_sessions()
        await _flush_records(runtime)
    except Exception:
        log.exception("drain failed; stopping now")
    finally:
        reactor.stop()


async def _flush_records(runtime: EdgeRuntime) -> None:
    """Write the usage and the Node acks still pending."""
    await runtime.usage.flush()
    await runtime.acks.flush()
