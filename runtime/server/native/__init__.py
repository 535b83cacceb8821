"""SGLang's native API: ``/generate``, the engine's admin routes and ``/``, ``/version`` (``api``);
``/tokenize``, ``/detokenize`` and token counting (``tokenize``)."""
