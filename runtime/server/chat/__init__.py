"""The one chat pipeline every chat-shaped route goes through: the chat body parsed and planned
(``request``: messages, sampling fields, the prompt rendered and fitted to the context), the
request's tools (``tools``: tool choice, schemas checked on arrival, calls extracted), one choice
generated as events (``generation``) and the pipeline's entry points (``pipeline``: start, gather,
collect, fan-out). Imports ``transport/``, never a protocol folder."""
