"""Static files (the admin's CSS and JS) served from the Edge process, on the public listener only.

WhiteNoise serves what `collectstatic` gathered into STATIC_ROOT: hashed names cached for a year,
gzip variants to clients that take them. Its Django middleware is sync only; under daphne that
would move every Django request to a thread, so this subclass runs in either stack and streams a
file through an async iterator, reading it off the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import IO, Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import FileResponse, HttpRequest
from whitenoise.middleware import WhiteNoiseMiddleware
from whitenoise.responders import StaticFile

from edge.runtime import runtime_installed
from iop_site.listeners import PUBLIC, listener_of_port

READ_CHUNK_BYTES = 256 * 1024


class PublicStaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise for the public listener; elsewhere `/static/` falls through to the URLconf
    (the operator listener answers 404: it serves its API and nothing else)."""

    async_capable = True
    sync_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any], settings: Any = settings):
        super().__init__(get_response, settings)
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        static_file = self._static_file(request)
        if static_file is None:
            return self.get_response(request)
        response = self.serve(static_file, request)
        return _streamed_async(response) if self.is_async else response

    def _static_file(self, request: HttpRequest) -> StaticFile | None:
        if runtime_installed():
            port = request.META.get("SERVER_PORT")
            if listener_of_port(int(port) if port and port.isdigit() else None) != PUBLIC:
                return None
        if self.autorefresh:
            return self.find_file(request.path_info)
        return self.files.get(request.path_info)


async def _streamed_async(response: FileResponse) -> FileResponse:
    """``response`` with its file read in a worker thread, chunk by chunk, as the ASGI handler
    asks for it (a sync iterator would be read whole first, with a warning)."""
    if response.file_to_stream is not None:
        # The response still closes the file: FileResponse registered it when it was set.
        response.streaming_content = _chunks(response.file_to_stream)
    return response


async def _chunks(file: IO[bytes]) -> AsyncIterator[bytes]:
    while chunk := await asyncio.to_thread(file.read, READ_CHUNK_BYTES):
        yield chunk
