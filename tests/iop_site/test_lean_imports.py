"""The serving Edge loads neither pyOpenSSL nor autobahn's WAMP half, and still serves websockets;
a package whose `__init__` is deferred runs it, once, when one of its own names is asked for."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from iop_site import lean_imports

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def package(tmp_path: Path) -> Iterator[str]:
    """A package `deferred_pkg` whose `__init__` counts its runs and imports a sibling."""
    root = tmp_path / "deferred_pkg"
    root.mkdir()
    (root / "__init__.py").write_text(
        "import builtins\n"
        "builtins.deferred_pkg_runs = getattr(builtins, 'deferred_pkg_runs', 0) + 1\n"
        "from deferred_pkg import heavy\n"
        "from deferred_pkg.light import LIGHT\n"
        "NAME = 'from the init'\n"
    )
    (root / "heavy.py").write_text("HEAVY = True\n")
    (root / "light.py").write_text("LIGHT = 'light'\n")
    sys.path.insert(0, str(tmp_path))
    yield "deferred_pkg"
    sys.path.remove(str(tmp_path))
    for name in [name for name in sys.modules if name.partition(".")[0] == "deferred_pkg"]:
        del sys.modules[name]
    import builtins

    builtins.__dict__.pop("deferred_pkg_runs", None)


def init_runs() -> int:
    import builtins

    return int(getattr(builtins, "deferred_pkg_runs", 0))


def test_a_submodule_imports_without_the_package_init(package: str) -> None:
    lean_imports.defer_package_init(package)

    from deferred_pkg.light import LIGHT

    assert LIGHT == "light"
    assert init_runs() == 0
    assert "deferred_pkg.heavy" not in sys.modules


def test_a_name_of_the_package_runs_its_init_once(package: str) -> None:
    deferred = lean_imports.defer_package_init(package)
    import deferred_pkg.light

    assert deferred_pkg.light.LIGHT == "light"  # the submodule, through the package

    from deferred_pkg import NAME

    assert NAME == "from the init"
    assert deferred.heavy.HEAVY is True
    assert init_runs() == 1
    with pytest.raises(AttributeError):
        deferred.missing  # noqa: B018
    assert init_runs() == 1


def test_only_a_package_can_be_deferred(package: str) -> None:
    with pytest.raises(ImportError, match=r"deferred_pkg\.light is not a package"):
        lean_imports.defer_package_init("deferred_pkg.light")


@pytest.mark.parametrize("argv", [["manage.py"], ["manage.py", "migrate"], ["manage.py", "test"]])
def test_other_commands_import_as_usual(argv: list[str]) -> None:
    modules_before = dict(sys.modules)

    assert lean_imports.leave_out(argv) is False

    assert sys.modules == modules_before


SERVING = textwrap.dedent(
    """
    import json, sys
    from iop_site import lean_imports
    lean_imports.leave_out(["manage.py", "run_edge"])
    import daphne.server  # as Django's app loading imports it in the Edge: the reactor too
    from twisted.internet import reactor
    from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
    from autobahn.twisted.websocket import (
        WebSocketClientFactory, WebSocketClientProtocol, WebSocketServerFactory,
        WebSocketServerProtocol,
    )

    loaded = {
        name: sys.modules.get(name) is not None
        for name in ("OpenSSL", "cryptography", "pygments", "click.core")
    }
    heard = []

    class Echo(WebSocketServerProtocol):
        def onMessage(self, payload, is_binary):
            self.sendMessage(payload[::-1])

    class Client(WebSocketClientProtocol):
        def onOpen(self):
            self.sendMessage(b"frame")

        def onMessage(self, payload, is_binary):
            heard.append(payload.decode())
            reactor.stop()

    def connect(port):
        factory = WebSocketClientFactory(f"ws://127.0.0.1:{port.getHost().port}/")
        factory.protocol = Client
        TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port).connect(factory)

    server = WebSocketServerFactory()
    server.protocol = Echo
    TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(server).addCallback(connect)
    reactor.callLater(20, reactor.stop)
    reactor.run()

    from autobahn.util import hl
    highlighted = hl("note", color="red")  # autobahn's use of click runs click's __init__
    import autobahn.twisted
    init_names = autobahn.twisted.ApplicationSession.__name__  # its __init__ runs now
    print(json.dumps({
        "loaded": loaded,
        "heard": heard,
        "init_names": init_names,
        "cryptography_after": "cryptography" in sys.modules,
        "highlighted": highlighted,
    }))
    """
)


def test_the_serving_edge_speaks_websocket_without_openssl_or_wamp() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SERVING], cwd=ROOT, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["loaded"] == {
        "OpenSSL": False,
        "cryptography": False,
        "pygments": False,
        "click.core": False,
    }
    assert result["highlighted"] == click.style("note", fg="red", bold=False)
    assert result["heard"] == ["emarf"]
    assert result["init_names"] == "ApplicationSession"
    assert result["cryptography_after"] is True
