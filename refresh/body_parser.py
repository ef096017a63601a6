"""`POST /refresh`'s body parsed in the plan worker when it is a fleet's.

A fleet's candidate arrives as megabytes of one JSON string (5.6 MB at 3,000 nodes); the
standard library decodes it in one call that holds the interpreter, and with it the event loop,
for 12-16 ms of CPU, longer when the cores are busy. The plan worker decodes it instead and the
Edge unpickles the result, a copy that takes about a millisecond (docs/benchmarks.md, "Fleet").
The same parse, the same errors: a smaller body, an Edge that does not own its process (tests,
a plain `daphne`), or a worker busy with something else is parsed here, as before.
"""

from __future__ import annotations

import io
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import get_encoding
from rest_framework.utils.json import strict_constant

from edge.operator_api.base import OperatorJSONParser
from edge.runtime import get_runtime
from refresh.plan_worker import PLAN_WORKER, WorkerBusy

# Below this the parse here takes about a millisecond or less: not worth a trip to the worker.
WORKER_PARSES_FROM_BYTES = 512 * 1024


class RefreshJSONParser(OperatorJSONParser):
    """The operator API's JSON parse, made in the plan worker for a fleet-sized body."""

    def decode(self, stream: Any, length: int, media_type: str | None, parser_context: Any) -> Any:
        if length < WORKER_PARSES_FROM_BYTES or not get_runtime().owns_process:
            return super().decode(stream, length, media_type, parser_context)
        encoding = get_encoding(parser_context or {})
        body = stream.read()
        try:
            return PLAN_WORKER.decode_json(
                body, encoding, strict_constant if self._json.strict else None
            )
        except WorkerBusy:
            return super().decode(io.BytesIO(body), length, media_type, parser_context)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
