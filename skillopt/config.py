"""Run configuration: nested frozen pydantic sections, resolved once at the CLI edge.

Order of precedence: defaults < preset < YAML file < dotted overrides (`--set a.b=c`) < flags.
Derived values are properties; nothing writes back into the config.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from skillopt.benchmarks.base import SplitSizes
from skillopt.errors import BadInput
from skillopt.harness.base import Limits
from skillopt.models.meter import Budget


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LearningRate(_Frozen):
    """How many edits a step may apply, scheduled over the steps of the run."""

    initial: int = 3
    final: int = 1
    schedule: Literal["constant", "linear", "cosine"] = "constant"


class TrainConfig(_Frozen):
    epochs: int = 2
    batch_size: int = 8
    minibatch_size: int = 4
    trials: int = 1
    concurrency: int = 4
    learning_rate: LearningRate = LearningRate()
    skill_token_cap: int = 2000
    include_successes: int = 2  # successes shown per reflection minibatch
    consolidate: bool = True
    summary_tokens: int = 400  # budget of each trace summary shown to the optimizer
    max_reflections_per_step: int = 3  # reflections per step, each one candidate
    demonstrations: bool = True  # propose a worked example from a solved train task
    merge: bool = True  # propose a merge of two complementary pool members
    ablations_per_step: int = 1  # single-edit candidates out of rejected bundles
    screen: bool = True  # check each candidate on its train tasks before validation (GEPA's minibatch test)
    leakage_check: bool = True  # reject edits that copy task text, before any rollout
    retry_errored: int = 2  # extra tries of a rollout that errored (infrastructure), later in the run


class GateConfig(_Frozen):
    """The sequential paired sign test that accepts a candidate (see optimizer/gate.py)."""

    metric: Literal["hard", "soft"] = "hard"
    alpha: float = 0.05  # chance of accepting a candidate that is no better (one-sided)
    min_effect: float = 0.1  # improvement per pair worth detecting; below it, stop early (futility)
    interim_alpha: float = 0.005  # p-value that accepts before every pair is in
    futility: float = 0.05  # stop when the chance of still accepting falls below this
    trials: int = 1  # pairs per validation task
    deterministic: Literal["auto", "on", "off"] = "auto"  # temperature 0 + seed where the target allows
    seed: int = 0  # sampling seed of deterministic rollouts
    per_step: int = 1  # screened candidates gated per step, best screen first
    noninferiority_margin: float = 0.05  # consolidation: accepted when not worse than this
    early_stop: bool = True  # False: every pair of every decision (no interim accept, no futility)

    @model_validator(mode="before")
    @classmethod
    def _drop_old(cls, data: Any) -> Any:
        if isinstance(data, dict) and "min_delta" in data:  # runs made before the sequential test
            data = {k: v for k, v in data.items() if k != "min_delta"}
        return data


class ModelsConfig(_Frozen):
    timeout_s: float = 180.0
    retries: int = 4  # retries after the first try of a call (0: one try)
    retry_base_delay_s: float = 1.0
    optimizer_temperature: float | None = None
    optimizer_max_tokens: int = 2048
    prices: dict[str, tuple[float, float]] = Field(default_factory=dict)


class RunConfig(_Frozen):
    benchmark: str = "gsm8k"
    harness: str = "chat"
    target_model: str = ""
    optimizer_model: str = ""
    seed_skill: str | None = None
    run_id: str | None = None
    splits: SplitSizes = SplitSizes()
    train: TrainConfig = TrainConfig()
    gate: GateConfig = GateConfig()
    limits: Limits = Limits()
    budget: Budget = Budget()
    models: ModelsConfig = ModelsConfig()
    harness_options: dict[str, Any] = Field(default_factory=dict)
    benchmark_options: dict[str, Any] = Field(default_factory=dict)

    def fingerprint(self) -> str:
        """Hash of what makes rollouts comparable: a resume with a different one is refused."""
        keep = {
            "benchmark": self.benchmark, "harness": self.harness, "target_model": self.target_model,
            "splits": self.splits.model_dump(), "limits": self.limits.model_dump(),
            "harness_options": self.harness_options, "benchmark_options": self.benchmark_options,
        }
        return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:16]


PRESETS: dict[str, dict[str, Any]] = {
    # Sized so a full run on a 2-core laptop with the embedded 0.5B model finishes in minutes.
    "quick": {
        "benchmark": "gsm8k",
        "splits": {"seed": 0, "train": 4, "val": 6, "test": 6},
        "train": {"epochs": 1, "batch_size": 4, "minibatch_size": 4, "concurrency": 6,
                  "learning_rate": {"initial": 2, "final": 1, "schedule": "constant"},
                  "skill_token_cap": 600, "include_successes": 1, "consolidate": False,
                  "summary_tokens": 200, "max_reflections_per_step": 1},
        "limits": {"max_tokens": 256, "timeout_s": 120},
        "models": {"optimizer_max_tokens": 1024},
    },
}


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_override(item: str) -> dict[str, Any]:
    """`train.epochs=3` -> {"train": {"epochs": 3}}; values are parsed as YAML scalars."""
    if "=" not in item:
        raise BadInput(f"bad override {item!r}: write --set section.key=value (e.g. --set train.epochs=3)")
    path, raw = item.split("=", 1)
    value = yaml.safe_load(raw) if raw.strip() else ""
    out: dict[str, Any] = value
    for part in reversed(path.strip().split(".")):
        out = {part: out}
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except OSError as e:
        raise BadInput(f"cannot read config file {p}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise BadInput(f"config file {p} is not valid YAML: {str(e).splitlines()[0]}") from e
    if not isinstance(data, dict):
        raise BadInput(f"config file {p} must hold a mapping of settings")
    return data


def resolve_config(*layers: dict[str, Any], source: str = "configuration") -> RunConfig:
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = deep_merge(merged, {k: v for k, v in layer.items() if v is not None})
    try:
        return RunConfig.model_validate(merged)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise BadInput(f"bad setting {where} in {source}: {err['msg']}") from e


def redacted(cfg: RunConfig) -> dict[str, Any]:
    """The config as written to config.yaml: no secrets (keys never enter RunConfig anyway)."""
    data = cfg.model_dump(mode="json")
    for section in ("harness_options", "benchmark_options"):
        for k in list(data.get(section, {})):
            if any(s in k.lower() for s in ("key", "token", "secret", "password")):
                data[section][k] = "***"
    return data
