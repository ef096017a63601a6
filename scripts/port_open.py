"""Exit 0 when a TCP port answers: `python scripts/port_open.py HOST PORT`."""

import socket
import sys

try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1):
        sys.exit(0)
except OSError:
    sys.exit(1)
