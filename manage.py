#!/usr/bin/env python
"""Django's command-line utility for IOP Edge."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iop_site.settings")
    from iop_site import event_loop, lean_imports

    # Before Django loads daphne, which makes its loop and imports Twisted and autobahn.
    event_loop.install(sys.argv, os.environ)
    lean_imports.leave_out(sys.argv)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
