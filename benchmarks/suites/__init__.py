"""Benchmark suites run by ``benchmarks/run.py``: each module has ``run(ctx) -> dict`` (the suite result).

Suites: agent, chat, few_shot, tree_of_thought, json, raw, profile, profile_agent, quant (see ``benchmarks/README.md``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# suite name -> module defining ``run(ctx)``
SUITES: dict[str, str] = {
    "agent": "agent",
    "chat": "chat",
    "few_shot": "few_shot",
    "tree_of_thought": "tree_of_thought",
    "json": "json_mode",
    "raw": "raw",
    "profile": "profile",
    "profile_agent": "profile_agent",
    "quant": "quant",
}


def get_suite(name: str) -> Callable[[Any], dict[str, Any]]:
    """The ``run`` function of suite ``name``."""
    if name not in SUITES:
        raise ValueError(f"suite must be one of {sorted(SUITES)} or 'all', got {name!r}")
    return importlib.import_module(f"{__name__}.{SUITES[name]}").run
