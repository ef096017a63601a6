"""Who asked for a refresh (plain Python): the words a record's ``requested_by`` keeps, per path.

The admin knows its user; the operator API knows the token a request was sent with and, from the
CLI, the OS user it reports (``X-Operator-User``); a start knows the OS user running the Edge.
"""

from __future__ import annotations

import getpass
import re

OS_USER_HEADER = "X-Operator-User"
MAX_OS_USER_CHARS = 64
MAX_REQUESTED_BY_CHARS = 150
# Printable ASCII (a header carries it), no spaces at the ends: a login name, `DOMAIN\\user`.
_OS_USER = re.compile(r"[!-~](?:[ -~]{0,62}[!-~])?")


def current_os_user() -> str:
    """The OS user this process runs as, or ``""`` when the system cannot say (a container
    without a passwd entry for its uid) or the name is not printable ASCII."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        return ""
    return user if is_os_user(user) else ""


def is_os_user(value: str) -> bool:
    return _OS_USER.fullmatch(value) is not None


def by_admin(username: str) -> str:
    # A Django username may take all of `requested_by`'s 150 characters.
    return f"admin {username}"[:MAX_REQUESTED_BY_CHARS]


def by_token(token_name: str, os_user: str, address: str) -> str:
    """``alice with operator-token`` (the CLI), or ``operator-token from 127.0.0.1``."""
    if os_user:
        return f"{os_user} with {token_name}"
    return f"{token_name} from {address}"


def at_start(os_user: str) -> str:
    return f"start by {os_user}" if os_user else "start"
