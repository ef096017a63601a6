from __future__ import annotations

from nodes.agent.cli import main

raise SystemExit(main())
