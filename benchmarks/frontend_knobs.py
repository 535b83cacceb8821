"""The schema front end's two cost knobs, set in a compile worker process (for ``bench_grammar.py``).

``bench_grammar.py --runtime-check-above N`` / ``--any-order-rules N`` run ``radixlm`` through the
server's path (``GrammarBackend``'s worker processes) with one of the front end's module-level
knobs changed (``json_schema.objects.RUNTIME_CHECK_ABOVE``: objects of more named members are
checked at runtime; ``MAX_ANY_ORDER_RULES``: the per-schema budget of any-order rules). The
workers are other processes, so the benchmark names this module's ``compile_parts`` as the
backend's ``compile_fn`` and passes the values in the environment (the pool copies it to each
worker it starts). Imports neither torch nor the matcher core, like the default compile function.
"""

from __future__ import annotations

import os
from typing import Any

from radixlm.constrained.compile.job import compile_parts as _compile_parts
from radixlm.constrained.compile.job import warm_up  # noqa: F401 - the worker runs the default's set-up too
from radixlm.constrained.json_schema import objects

ENV = {"RUNTIME_CHECK_ABOVE": "RADIXLM_BENCH_RUNTIME_CHECK_ABOVE",
       "MAX_ANY_ORDER_RULES": "RADIXLM_BENCH_ANY_ORDER_RULES"}


def apply_knobs() -> dict[str, int]:
    """Set the knobs named in the environment; ``{knob: value}`` of those set."""
    applied = {}
    for knob, var in ENV.items():
        if os.environ.get(var):
            applied[knob] = int(os.environ[var])
            setattr(objects, knob, applied[knob])
    return applied


def compile_parts(vocab: Any, request: Any) -> Any:
    """The default worker compile, under the knobs the environment names."""
    apply_knobs()
    return _compile_parts(vocab, request)
