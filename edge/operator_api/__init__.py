"""The operator API on the loopback operator listener: `GET /status`, `POST /refresh`, its schema.

Beside the public OpenAI API (`edge.openai_api`); `POST /refresh` itself lives in `refresh`.
"""
