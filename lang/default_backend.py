"""The default backend (``set_default_backend``) and the module-level calls made on it.

As in SGLang's ``api.py``: ``flush_cache()`` and ``get_server_info()`` act on the default backend
(or the one passed), and return ``False`` / ``None`` when there is none.
"""

from __future__ import annotations

from typing import Any

from radixlm.lang.backend_engine import as_backend

_default_backend: Any = None


def set_default_backend(backend: Any) -> None:
    """Use ``backend`` (an ``Engine``, ``RuntimeEndpoint`` or ``OpenAI``) when a run names none.

    None clears it.
    """
    global _default_backend
    _default_backend = None if backend is None else as_backend(backend)


def get_default_backend() -> Any:
    """The backend set by :func:`set_default_backend`, or None."""
    return _default_backend


def resolve_backend(backend: Any) -> Any:
    """``backend`` as a backend object, else the default one; ``ValueError`` when neither exists."""
    if backend is not None:
        return as_backend(backend)
    if _default_backend is None:
        raise ValueError("no backend: pass backend=... or call set_default_backend(Engine(...) or "
                         "RuntimeEndpoint(url)) first")
    return _default_backend


def flush_cache(backend: Any = None) -> bool:
    """Drop the prefix cache of ``backend`` (default: the default backend).

    True when flushed; False when there is no backend or it flushed nothing (requests running,
    or a remote API without a cache to control).
    """
    target = as_backend(backend) if backend is not None else _default_backend
    if target is None:
        return False
    return bool(target.flush_cache())


def get_server_info(backend: Any = None) -> dict | None:
    """The server information of ``backend`` (default: the default backend); None without one."""
    target = as_backend(backend) if backend is not None else _default_backend
    if target is None:
        return None
    return target.get_server_info()
