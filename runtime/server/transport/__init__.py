"""The HTTP transport every route stands on: errors in each protocol's shape (``errors``), the request
body read, bounded and typed (``body``), server-sent events and NDJSON (``sse``), who may call
(``access``: API keys, Host/Origin checks, CORS), per-client connection caps (``connection_guard``)
and what every route shares (``state``, with ``ServedEngine``, the engine as the server sees it).
Never imports the chat pipeline or a protocol folder."""
