"""OpenAI's API: ``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions`` (``api``), and
``/v1/embeddings`` with Ollama's ``/api/embed`` (``embeddings``)."""
