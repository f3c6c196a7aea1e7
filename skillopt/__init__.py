"""skillopt: train agent skills (SKILL.md) with rollouts, reflection and gated edits.

The Python API (see the README's "Python API" section):

    import skillopt
    run = skillopt.train(tasks=[...], scorer=my_scorer, target_model="...", optimizer_model="...")
    skillopt.evaluate(run, split="test"); skillopt.compare(run.seed_ref, run.best_ref)
    skillopt.rollouts_df(run)                     # pandas, with the `analysis` extra

Everything is imported on first use: `import skillopt` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "train": "skillopt.api", "evaluate": "skillopt.api", "compare": "skillopt.api", "judge": "skillopt.api",
    "resolved_config": "skillopt.api", "TrainResult": "skillopt.api", "EvalResult": "skillopt.api",
    "runs_df": "skillopt.analysis", "rollouts_df": "skillopt.analysis", "versions_df": "skillopt.analysis",
    "steps_df": "skillopt.analysis", "decisions_df": "skillopt.analysis",
    "Task": "skillopt.benchmarks.base", "Score": "skillopt.benchmarks.base",
    "Skill": "skillopt.skill", "RunConfig": "skillopt.config", "BadInput": "skillopt.errors",
    "benchmark": "skillopt.benchmarks.registry", "scorer": "skillopt.benchmarks.custom",
}  # (harnesses register with skillopt.harness.registry.harness: `skillopt.harness` is the package)

__all__ = ["__version__", *_EXPORTS]


def __dir__() -> list[str]:
    """What `dir(skillopt)` and tab completion show: the lazily imported API too (`train`, ...)."""
    return sorted(set(globals()) | set(_EXPORTS))


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'skillopt' has no attribute {name!r}")
