"""Exit 0 when a TCP port answers: `python scripts/port_open.py HOST PORT`."""

import sys

from edge.ports import port_open

sys.exit(0 if port_open(sys.argv[1], int(sys.argv[2]), timeout_s=1.0) else 1)
