"""Run configuration: nested frozen pydantic sections, resolved once at the CLI edge.

Order of precedence: defaults < preset < YAML file < dotted overrides (`--set a.b=c`) < flags.
Derived values are properties; nothing writes back into the config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from skillopt.benchmarks.base import SplitSizes
from skillopt.errors import BadInput
from skillopt.harness.base import Limits
from skillopt.models.meter import Budget
from skillopt.store.files import read_user_text
from skillopt.store.redact import redact

Count = Annotated[int, Field(ge=1)]  # sizes and counts: at least one
Seconds = Annotated[float, Field(gt=0)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LearningRate(_Frozen):
    """How many edits a step may apply, scheduled over the steps of the run."""

    initial: Count = 3
    final: Count = 1
    schedule: Literal["constant", "linear", "cosine"] = "constant"


class TrainConfig(_Frozen):
    epochs: Count = 2
    batch_size: Count = 8
    minibatch_size: Count = 4
    trials: Count = 1
    concurrency: Count = 4
    learning_rate: LearningRate = LearningRate()
    skill_token_cap: Count = 2000
    include_successes: Annotated[int, Field(ge=0)] = 2  # successes shown per reflection minibatch
    consolidate: bool = True
    summary_tokens: Count = 400  # budget of each trace summary shown to the optimizer
    max_reflections_per_step: Count = 3  # reflections per step, each one candidate
    demonstrations: bool = True  # propose a worked example from a solved train task
    merge: bool = True  # propose a merge of two complementary pool members
    ablations_per_step: Annotated[int, Field(ge=0)] = 1  # single-edit candidates out of rejected bundles
    screen: bool = True  # check each candidate on its train tasks before validation (GEPA's minibatch test)
    leakage_check: bool = True  # reject edits that copy task text, before any rollout
    retry_errored: Annotated[int, Field(ge=0)] = 2  # extra tries of a rollout that errored (infrastructure), later


class GateConfig(_Frozen):
    """The sequential paired sign test that accepts a candidate (see optimizer/gate.py)."""

    metric: Literal["hard", "soft"] = "hard"
    alpha: float = 0.05  # chance of accepting a candidate that is no better (one-sided)
    min_effect: float = 0.1  # improvement per pair worth detecting; below it, stop early (futility)
    interim_alpha: float = 0.005  # p-value that accepts before every pair is in
    futility: float = 0.05  # stop when the chance of still accepting falls below this
    trials: Count = 1  # pairs per validation task
    deterministic: Literal["auto", "on", "off"] = "auto"  # temperature 0 + seed where the target allows
    seed: int = 0  # sampling seed of deterministic rollouts
    per_step: Count = 1  # screened candidates gated per step, best screen first
    noninferiority_margin: float = 0.05  # consolidation: accepted when not worse than this
    early_stop: bool = True  # False: every pair of every decision (no interim accept, no futility)

    @model_validator(mode="before")
    @classmethod
    def _drop_old(cls, data: Any) -> Any:
        if isinstance(data, dict) and "min_delta" in data:  # runs made before the sequential test
            data = {k: v for k, v in data.items() if k != "min_delta"}
        return data


class ModelsConfig(_Frozen):
    timeout_s: Seconds = 180.0
    retries: Annotated[int, Field(ge=0)] = 4  # retries after the first try of a call (0: one try)
    retry_base_delay_s: Annotated[float, Field(ge=0)] = 1.0
    optimizer_temperature: Annotated[float, Field(ge=0)] | None = None
    optimizer_max_tokens: Count = 2048
    prices: dict[str, tuple[float, float]] = Field(default_factory=dict)


class ExecutorConfig(_Frozen):
    """Where rollouts run (engine/executor.py): `local`, in this process, or `ray`, spread over the
    nodes of a Ray cluster (engine/ray_executor.py). The rest is for `ray`: what one rollout asks
    of a node, how often a rollout whose worker or node was lost runs again, and where on the node
    its workspace goes. Never part of the settings that matter: a run may resume on either."""

    kind: Literal["local", "ray"] = "local"
    address: str | None = None  # "auto" (default: $RAY_ADDRESS or a cluster started here), HOST:PORT, ray://HOST:10001
    num_cpus: Annotated[float, Field(ge=0)] = 1.0  # per rollout
    memory_mb: Count | None = None  # per rollout (Ray's memory resource)
    resources: dict[str, float] = Field(default_factory=dict)  # more per rollout; container benchmarks add docker: 1
    max_retries: Annotated[int, Field(ge=0)] = 3  # a rollout whose worker or node was lost runs again elsewhere
    work_dir: str | None = None  # on each node: workspaces and grading logs (default: its temp folder)


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
    sandbox: bool = True  # agents (and tests of their code) run in bubblewrap; False: --no-sandbox
    executor: ExecutorConfig = ExecutorConfig()  # where rollouts run: local or a Ray cluster
    # what makes two rollouts the same, the resume fingerprint: skillopt.engine.settings


PRESETS: dict[str, dict[str, Any]] = {
    # Sized so a full run on a 2-core laptop with the embedded 0.5B model finishes in minutes.
    "quick": {
        "benchmark": "gsm8k",
        "splits": {"seed": 0, "train": 8, "val": 24, "test": 60},
        "train": {"epochs": 1, "batch_size": 8, "minibatch_size": 4, "concurrency": 4,
                  "learning_rate": {"initial": 2, "final": 1, "schedule": "constant"},
                  "skill_token_cap": 800, "include_successes": 1, "consolidate": False,
                  "summary_tokens": 200, "max_reflections_per_step": 3},
        "limits": {"max_tokens": 320, "timeout_s": 300},
        # a CPU serves the optimizer's calls one or two at a time: the wait for a slot counts too
        "models": {"optimizer_max_tokens": 768, "timeout_s": 900},
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
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        why = str(e).splitlines()[0]
        raise BadInput(f"bad override {item!r}: its value is not valid YAML ({why}); quote it "
                       f"(--set '{path}=\"...\"')") from None
    if not path.strip() or any(not part.strip() for part in path.split(".")):
        raise BadInput(f"bad override {item!r}: write --set section.key=value (e.g. --set train.epochs=3)")
    out: dict[str, Any] = value
    for part in reversed(path.strip().split(".")):
        out = {part: out}
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    text = read_user_text(p, "config file")
    try:
        data = yaml.safe_load(text) or {}
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
    """The config as written to config.yaml, the index and trackers: every secret masked (at any
    depth, in URLs, known values). A resume gives the masked values again (see engine/run.py)."""
    data = cfg.model_dump(mode="json")
    for k in ("max_tokens", "stop"):  # unset: the benchmark's own (engine.settings.effective_limits)
        if k not in cfg.limits.model_fields_set:
            data["limits"].pop(k, None)
    return redact(data)
