"""The listeners a process binds, pinned over every config it runs (`run_edge --listen`).

Two Edges of one config can share a host only on different ports, so `run_edge --listen` and
`--admin-listen` override `edge.listen` and `edge.admin_listen`. The override is the process's, not
the config's: the canonical form and the revision stay the file's (both Edges run the same
revision), and every config the process swaps in later (a refresh, a takeover) gets the same
listeners, since those are the ports it is bound to.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from edge.config import formats
from edge.config.schema import EdgeConfig


class ListenOverrideError(ValueError):
    """A ``--listen`` / ``--admin-listen`` value that cannot be used; the message names the flag."""


@dataclass(frozen=True, slots=True)
class BoundListeners:
    """The public and operator listeners a process serves on."""

    listen: str
    admin_listen: str


def bound_listeners(
    config: EdgeConfig, listen: str | None = None, admin_listen: str | None = None
) -> BoundListeners:
    """The config's listeners with the flags given over them; a bad flag raises
    ListenOverrideError naming it."""
    chosen = BoundListeners(listen or config.edge.listen, admin_listen or config.edge.admin_listen)
    for flag, value in (("--listen", listen), ("--admin-listen", admin_listen)):
        if value is not None and (problem := formats.listen_problem(value)):
            raise ListenOverrideError(f"{flag}: {problem}")
    if admin_listen is not None and not formats.is_loopback(admin_listen):
        raise ListenOverrideError(
            "--admin-listen: must be a loopback address such as 127.0.0.1 or [::1]"
        )
    ports = {
        "--listen (edge.listen)": chosen.listen,
        "--admin-listen (edge.admin_listen)": chosen.admin_listen,
    }
    if config.openai.listen:
        ports["openai.listen"] = config.openai.listen
    seen: dict[str, str] = {}
    for name, value in ports.items():
        port = value.rpartition(":")[2]
        if port in seen:
            raise ListenOverrideError(
                f"{name}: port {port} is already used by {seen[port]}; each listener needs its own"
            )
        seen[port] = name
    return chosen


def pin_listeners(config: EdgeConfig, bound: BoundListeners | None) -> EdgeConfig:
    """``config`` with the process's listeners; its canonical form and revision unchanged."""
    if bound is None or (
        bound.listen == config.edge.listen and bound.admin_listen == config.edge.admin_listen
    ):
        return config
    edge = dataclasses.replace(config.edge, listen=bound.listen, admin_listen=bound.admin_listen)
    return dataclasses.replace(config, edge=edge)
