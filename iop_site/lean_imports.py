"""What the serving Edge does not import: about 14 MB of its 88 MB at rest (docs/benchmarks.md).

- **pyOpenSSL.** Twisted's reactor imports it when it can, for TLS ports and `startTLS`. The Edge
  serves plain TCP only (TLS ends at a front: docs/operations.md, "Behind a TLS front"), and
  Twisted runs without it: TLS is an optional extra of Twisted's, and every import of it there
  and in autobahn falls back when it is missing. Marked missing, it is never loaded (5 MB).
- **autobahn's WAMP sessions.** Daphne needs only `autobahn.twisted.websocket`, but importing it
  runs the package's `__init__`, which also imports the WAMP session API and, through its
  authentication, cryptography (7 MB). The package is made without running its `__init__`; the
  first name asked of it that is not a submodule runs it, so nothing that uses it changes.
- **Pygments.** DRF's compat imports it, when it can, to highlight Markdown in the browsable
  API; without Markdown (not installed) it is never called (0.9 MB).
- **Click's `__init__`.** autobahn imports click, when it can, to colour a log line it does not
  log here; uvicorn's command line needs it. Deferred as autobahn's is (0.9 MB).

Done in `manage.py` before Django loads daphne, for the serving command only (as the event loop
is, `iop_site.event_loop`); other commands and the tests import as usual.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

from iop_site.event_loop import serves

UNUSED_MODULES = ("OpenSSL", "pygments")
PACKAGES_OF_SUBMODULES = ("autobahn.twisted", "click")


def leave_out(argv: Sequence[str]) -> bool:
    """For the serving command, keep what it never uses from loading; whether it was done."""
    if not serves(argv):
        return False
    for name in UNUSED_MODULES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # imports of it fail
    for name in PACKAGES_OF_SUBMODULES:
        defer_package_init(name)
    return True


def defer_package_init(name: str) -> ModuleType:
    """The package ``name``, importable and with its submodules importable, its own `__init__`
    run only when a name that is not one of its loaded submodules is first asked of it."""
    if name in sys.modules:
        return sys.modules[name]
    parent_name, _, child = name.rpartition(".")
    parent = importlib.import_module(parent_name) if parent_name else None
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not a package", name=name)
    package = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def run_init(attribute: str) -> object:
        del package.__getattr__
        loader.exec_module(package)
        return getattr(package, attribute)

    package.__getattr__ = run_init  # type: ignore[method-assign]
    sys.modules[name] = package
    if parent is not None:
        setattr(parent, child, package)
    return package
