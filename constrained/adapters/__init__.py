"""Other engines' grammar compilers behind our ``CompiledGrammar``/``GrammarMatcher`` interface
(``--grammar-backend``): ``radixlm`` (our front end on llguidance's matcher, the default),
``llguidance`` (llguidance's own JSON-schema/regex compilers, ``llguidance_core``) and
``xgrammar`` (the optional ``xgrammar`` package, ``xgrammar_core``).

Each adapter module has ``compile_request(vocab, request) -> grammar`` (a ``CompileRequest`` in, a
finished grammar out). ``GrammarBackend`` runs it in threads (``ThreadCompilePool``, with the same
wall-time budget): these compilers are native and take milliseconds, so no worker process is needed.
"""

from __future__ import annotations

import importlib

CORES = ("radixlm", "xgrammar", "llguidance")
# core -> (module with compile_request, the pip requirement that brings its package)
_ADAPTERS = {
    "llguidance": ("radixlm.constrained.adapters.llguidance_core", "llguidance"),
    "xgrammar": ("radixlm.constrained.adapters.xgrammar_core", "radixlm[xgrammar]"),
}


def adapter_compile_fn(name: str) -> str | None:
    """``"module:compile_request"`` of grammar backend ``name`` (None for ``radixlm``, which
    compiles in worker processes). The module is imported here, so a missing package fails at
    start-up: ``ValueError`` naming the pip requirement, or the unknown name."""
    if name == "radixlm":
        return None
    if name not in _ADAPTERS:
        raise ValueError(f"unknown grammar backend {name!r} (expected one of {', '.join(CORES)})")
    module, requirement = _ADAPTERS[name]
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"grammar backend {name!r} needs a package that is not installed ({e.name}): "
                         f"pip install '{requirement}'") from None
    return f"{module}:compile_request"
