"""``SuiteContext``: what every suite receives (checkpoint, repetitions, systems, quick mode)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from suites.systems import SystemPool, Unavailable


@dataclass
class SuiteContext:
    """One run's settings; ``pool`` owns the engines/models (shared across suites, closed by run.py)."""

    model_path: str
    size: str
    reps: int
    quick: bool
    pool: SystemPool
    systems: tuple[str, ...] | None = None  # None: each suite's default systems
    log: Callable[[str], None] = field(default=print)

    @property
    def tokenizer(self) -> Any:
        return self.pool.get("radixlm").engine.tokenizer

    def pick(self, defaults: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, str]]:
        """(available systems by name, unavailable name -> reason) among this suite's ``defaults``."""
        names = [n for n in defaults if self.systems is None or n in self.systems]
        ready: dict[str, Any] = {}
        missing: dict[str, str] = {}
        for name in names:
            system = self.pool.get(name)
            if isinstance(system, Unavailable):
                missing[name] = system.reason
            else:
                ready[name] = system
        return ready, missing

    def scale(self, full: int, quick: int) -> int:
        """``quick`` in quick mode, else ``full`` (workload sizes)."""
        return quick if self.quick else full
