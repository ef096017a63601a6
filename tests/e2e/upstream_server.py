"""A scripted OpenAI-compatible upstream for the end-to-end tests (stdlib only).

Run as ``python -m tests.e2e.upstream_server --port PORT [--no-models]`` from the repository root.
It serves ``POST /v1/chat/completions``, ``/v1/completions`` (``echo: <prompt>``),
``/v1/embeddings`` (per input, a vector from its length; ``dimensions`` and
``encoding_format: base64`` honoured) and ``/v1/responses`` (``echo: <last user text>``, streamed
as OpenAI's event sequence with ``event:`` lines), each streaming and not (embeddings: not) and
with usage. The served model name in each request picks the behaviour, on every endpoint unless
said, so one process plays many providers:

- ``status-<code>`` (and ``status-400-context``): that HTTP status with an OpenAI error envelope;
  429 and 503 carry ``Retry-After: 2``.
- ``big-<N>``: the answer is N bytes of text (streamed in 16 KiB deltas); embeddings: about N
  bytes of vectors.
- ``reasoning``: adds ``reasoning_content`` (message, early deltas) and ``refusal: null``.
- ``cut-after-done``: content deltas, ``data: [DONE]``, then the connection is cut (responses: the
  whole event sequence, then the cut).
- ``double-usage``: a stream with two usage chunks (chat, completions).
- ``stream-error``: responses: an ``error`` event after the first delta, then the stream ends.
- ``hang`` / ``hang-after-<k>``: never answers / stalls after k deltas, until the client leaves.
- ``slow-<ms>``: ``ms`` milliseconds between deltas.
- ``max-tokens-only``: answers ``max_tokens=<max_tokens>``, ignoring ``max_completion_tokens``.
- anything else: ``echo: <last user text>``.

``GET /_requests`` lists the requests received (``path``, ``model``, ``body`` with long strings
cut short) and ``POST /_clear`` empties that list.
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.e2e.upstream_answers import (
    ResponsesAnswer,
    embeddings,
    pieces,
    prompt_text,
    reply_deltas,
    words,
)

LOGGED_STRING_CHARS = 200
CONTEXT_LIMIT_TOKENS = 4096
FINGERPRINT = "fp_scripted"
SERVICE_TIER = "default"

ERROR_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "permission_denied"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", "internal_error"),
    503: ("server_error", "service_unavailable"),
}
RETRY_AFTER_STATUSES = {429, 503}


def truncated(value: Any) -> Any:
    """``value`` with every long string cut short, for the request log."""
    if isinstance(value, str) and len(value) > LOGGED_STRING_CHARS:
        return f"{value[:LOGGED_STRING_CHARS]}...({len(value)} chars)"
    if isinstance(value, dict):
        return {key: truncated(item) for key, item in value.items()}
    if isinstance(value, list):
        return [truncated(item) for item in value]
    return value


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def last_user_text(body: dict[str, Any]) -> str:
    users = [
        m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"
    ]
    return _text(users[-1].get("content")) if users else ""


def prompt_tokens(body: dict[str, Any]) -> int:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    return max(1, sum(len(_text(m.get("content")).split()) for m in messages))


class Answer:
    """What one chat request is answered with, decided by its served model name."""

    id_prefix = "chatcmpl"
    chunk_object = "chat.completion.chunk"

    def user_text(self) -> str:
        return last_user_text(self.body)

    def prompt_count(self) -> int:
        return prompt_tokens(self.body)

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.model = str(body.get("model", ""))
        self.n = int(body.get("n") or 1)
        self.reasoning = self.model == "reasoning"
        self.deltas = reply_deltas(self.model, self.user_text(), body)
        self.reasoning_deltas = pieces(f"Thinking about {self.user_text()}")
        self.id = f"{self.id_prefix}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())

    @property
    def content(self) -> str:
        return "".join(self.deltas)

    def usage(self) -> dict[str, Any]:
        reasoning = len(self.reasoning_deltas) * self.n if self.reasoning else 0
        completion = len(self.deltas) * self.n + reasoning
        prompt = self.prompt_count()
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def logprobs(self, text: str) -> dict[str, Any] | None:
        if not self.body.get("logprobs"):
            return None
        tokens = pieces(text) if text else []
        content = [
            {"token": t, "logprob": -0.5, "bytes": list(t.encode()), "top_logprobs": []}
            for t in tokens
        ]
        return {"content": content, "refusal": None}

    def _envelope(self, obj: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "service_tier": SERVICE_TIER,
        }

    def whole(self) -> dict[str, Any]:
        return self.completion()

    def completion(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning_deltas)
            message["refusal"] = None
        choices = [
            {
                "index": i,
                "message": message,
                "logprobs": self.logprobs(self.content),
                "finish_reason": "stop",
            }
            for i in range(self.n)
        ]
        return {**self._envelope("chat.completion"), "choices": choices, "usage": self.usage()}

    def chunk(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
        chunk: dict[str, Any] = {**self._envelope(self.chunk_object), "choices": choices}
        if usage is not None:
            chunk["usage"] = usage
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    def delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choices = [
            {"index": i, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            for i in range(self.n)
        ]
        if "content" in delta:
            for choice in choices:
                choice["logprobs"] = self.logprobs(delta["content"])
        return self.chunk(choices)

    def opening(self) -> list[bytes]:
        first: dict[str, Any] = {"role": "assistant", "content": ""}
        if self.reasoning:
            first["refusal"] = None
        return [self.delta(first)]

    def body_events(self) -> list[bytes]:
        """The content events of a stream: reasoning deltas first, then the content deltas."""
        events = []
        if self.reasoning:
            events += [self.delta({"reasoning_content": r}) for r in self.reasoning_deltas]
        return events + [self.delta({"content": d}) for d in self.deltas]

    def text_event(self, text: str) -> bytes:
        return self.delta({"content": text})

    def closing(self, usage_chunks: int, cut: bool) -> list[bytes]:
        """The end of a stream: closing chunk, usage chunks, ``[DONE]`` (only that when ``cut``)."""
        if cut:
            return [DONE]
        return [self.delta({}, "stop"), *[self.chunk([], self.usage())] * usage_chunks, DONE]


class CompletionAnswer(Answer):
    """A completions answer: ``echo: <prompt>``, choices with ``text`` (``text_completion``)."""

    id_prefix = "cmpl"
    chunk_object = "text_completion"

    def user_text(self) -> str:
        prompt = self.body.get("prompt")
        return prompt_text(
            prompt[0]
            if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int)
            else prompt
        )

    def prompt_count(self) -> int:
        return words(self.user_text())

    def completion(self) -> dict[str, Any]:
        choices = [
            {"text": self.content, "index": i, "logprobs": None, "finish_reason": "stop"}
            for i in range(self.n)
        ]
        return {**self._envelope("text_completion"), "choices": choices, "usage": self.usage()}

    def delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        text = delta.get("content", "")
        choices = [
            {"text": text, "index": i, "logprobs": None, "finish_reason": finish_reason}
            for i in range(self.n)
        ]
        return self.chunk(choices)

    def opening(self) -> list[bytes]:
        return []


DONE = b"data: [DONE]\n\n"
# The POST paths under /v1 and what answers each (embeddings: a function, never streamed).
ENDPOINTS: dict[str, Any] = {
    "chat/completions": lambda body, model: Answer(body),
    "completions": lambda body, model: CompletionAnswer(body),
    "embeddings": None,
    "responses": ResponsesAnswer,
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: UpstreamServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request log at /_requests is the record

    # -- helpers -------------------------------------------------------------------------------

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _wait_for_client_to_leave(self) -> None:
        """Hold the connection open, answering nothing, until the client closes it."""
        self.close_connection = True
        while True:
            readable, _, _ = select.select([self.connection], [], [], 0.5)
            if readable:
                try:
                    if not self.connection.recv(4096):
                        return
                except OSError:
                    return

    def _error(self, status: int, message: str, code: str | None = None) -> None:
        kind, default_code = ERROR_TYPES.get(status, ("server_error", "upstream_error"))
        headers = {"Retry-After": "2"} if status in RETRY_AFTER_STATUSES else {}
        envelope = {"message": message, "type": kind, "param": None, "code": code or default_code}
        self._send_json(status, {"error": envelope}, headers)

    def _log(self, model: Any, body: Any) -> None:
        with self.server.lock:
            self.server.received.append(
                {"path": self.path, "model": model, "body": truncated(body)}
            )

    # -- routes --------------------------------------------------------------------------------

    def do_GET(self) -> None:
        if self.path == "/_requests":
            with self.server.lock:
                self._send_json(200, list(self.server.received))
            return
        self._log(None, None)
        if self.path.rstrip("/") == "/v1/models" and self.server.serve_models:
            model = {"id": "ok", "object": "model", "created": 0, "owned_by": "scripted"}
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._error(404, f"Unknown endpoint GET {self.path}.", "not_found")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/_clear":
            with self.server.lock:
                self.server.received.clear()
            self._send_json(200, {"cleared": True})
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._log(None, raw.decode(errors="replace"))
            self._error(400, "The body is not JSON.")
            return
        model = body.get("model") if isinstance(body, dict) else None
        self._log(model, body)
        endpoint = self.path.rstrip("/").removeprefix("/v1/")
        if endpoint not in ENDPOINTS or not isinstance(body, dict):
            self._error(404, f"Unknown endpoint POST {self.path}.", "not_found")
            return
        self._answer(endpoint, body, str(model or ""))

    def _answer(self, endpoint: str, body: dict[str, Any], model: str) -> None:
        if model == "status-400-context":
            message = (
                f"This model's maximum context length is {CONTEXT_LIMIT_TOKENS} tokens. However, "
                f"your messages resulted in {CONTEXT_LIMIT_TOKENS + 904} tokens. "
                "Please reduce the length of the messages."
            )
            self._error(400, message, "context_length_exceeded")
            return
        if model.startswith("status-"):
            status = int(model.removeprefix("status-"))
            self._error(status, f"Scripted upstream error {status}.")
            return
        if model == "hang":
            self._wait_for_client_to_leave()
            return
        if endpoint == "embeddings":
            self._send_json(200, embeddings(body, model))
            return
        answer = ENDPOINTS[endpoint](body, model)
        delay = int(model.removeprefix("slow-")) / 1000 if model.startswith("slow-") else 0.0
        if not body.get("stream"):
            time.sleep(delay * len(answer.deltas))
            self._send_json(200, answer.whole())
            return
        self._stream(answer, model, delay)

    def _stream(self, answer: Any, model: str, delay: float) -> None:
        include_usage = bool((answer.body.get("stream_options") or {}).get("include_usage"))
        self._start_stream()
        for event in answer.opening():
            self._write_chunk(event)
        if model.startswith("hang-after-"):
            count = int(model.removeprefix("hang-after-"))
            for i in range(count):
                self._write_chunk(answer.text_event(f"tok{i} "))
            self._wait_for_client_to_leave()
            return
        events = answer.body_events()
        erroring = model == "stream-error" and isinstance(answer, ResponsesAnswer)
        if erroring:
            events = [*events[:1], answer.error_event()]
        for event in events:
            if delay:
                time.sleep(delay)
            self._write_chunk(event)
        if erroring:
            self._end_stream()
            return
        usage_chunks = 2 if model == "double-usage" else int(include_usage)
        cut = model == "cut-after-done"
        for event in answer.closing(usage_chunks, cut):
            self._write_chunk(event)
        if cut:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self._end_stream()


class UpstreamServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, port: int, serve_models: bool) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.serve_models = serve_models
        self.received: list[dict[str, Any]] = []
        self.lock = threading.Lock()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--no-models", action="store_true", help="GET /v1/models answers 404")
    args = parser.parse_args()
    server = UpstreamServer(args.port, serve_models=not args.no_models)
    print(f"scripted upstream on http://127.0.0.1:{args.port}/v1", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
