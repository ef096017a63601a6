"""The Node agent: a plain-Python process that dials out to the Edge and runs its requests.

Run it with ``python -m nodes.agent --edge ws://HOST:PORT/ws/node/ --node-id ID``; see
``docs/nodes.md``. Nothing here imports Django.
"""
