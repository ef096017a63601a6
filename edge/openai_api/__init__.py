"""The OpenAI-compatible API: a small ASGI app for `/v1/` beside Django, sharing the runtime."""
