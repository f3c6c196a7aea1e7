"""The settings that matter: the one definition of what makes two rollouts the same.

A rollout's result depends on the skill, the task, the trial, and these settings: the benchmark
(its data, its scorer and scorer version, its options that change scores such as a test timeout),
the harness with its options that change what the agent does, the target model and the limits.
`Settings` holds exactly those, and drives:

- the rollout cache key (`Settings.rollout_key`): a rollout is reused, in this run or by `eval` and
  `compare` from any run, only when all of them match (per rollout, the task's own content stands
  for the benchmark data);
- the resume fingerprint (`Settings.fingerprint`): a run resumes only with the same settings, data
  and splits. It is a hash, computed before any redaction, so secrets in the settings count
  without being stored.

`SCORING_SECTIONS` are the configuration sections a stored run hands to `eval` and `compare` to
score more skills the way it scored its own.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from skillopt.benchmarks.base import (
    Benchmark, ShortAnswers, SplitSizes, StopSequences, Task, data_hash, split_data_hash,
)
from skillopt.config import RunConfig
from skillopt.harness.base import Harness, Limits, SetsTemperature
from skillopt.models.spec import parse_model_spec

# the sections of a run's configuration that say how its rollouts were made and scored
SCORING_SECTIONS = ("benchmark", "harness", "target_model", "splits", "limits", "harness_options",
                    "benchmark_options", "train", "gate")
# options that change how work is scheduled or where logs go, never what a rollout does or scores
SCHEDULING_HARNESS_OPTIONS = frozenset({"max_processes"})
SCHEDULING_BENCHMARK_OPTIONS = frozenset({"instance_ids", "log_dir", "cache_dir"})
DEFAULT_SCORER_VERSION = "1"


@runtime_checkable
class VersionedScorer(Protocol):
    """A benchmark that versions its scorer: a new version never reuses rollouts scored by an old one."""

    scorer_version: str


class Settings(BaseModel):
    """What a rollout's result depends on, besides the skill, the task and the trial."""

    model_config = ConfigDict(frozen=True)

    benchmark: str
    data_hash: str  # of every task of the benchmark
    scorer_version: str
    benchmark_options: dict[str, Any]
    harness: str
    harness_options: dict[str, Any]
    target_model: str
    limits: dict[str, Any]

    def _hash(self, *parts: Any) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()

    def rollout_key(self, skill_sha: str, task: Task, trial: int) -> str:
        """The cache key of one rollout: the task's content stands for the benchmark's data."""
        task_hash = hashlib.sha256(task.model_dump_json().encode()).hexdigest()[:16]
        return self._hash(skill_sha, task.id, task_hash, trial, self.model_dump(exclude={"data_hash"}))

    def fingerprint(self, splits: SplitSizes) -> str:
        """What a resumed run must match: these settings, the whole data and the splits."""
        return self._hash(self.model_dump(), splits.model_dump())[:16]


def deterministic_mode(cfg: RunConfig, harness: Harness) -> bool:
    """Whether rollouts run at temperature 0 with a seed: `gate.deterministic`, where "auto" means
    whenever the harness passes a temperature to the model (chat) and the model accepts one."""
    if cfg.gate.deterministic != "auto":
        return cfg.gate.deterministic == "on"
    target = parse_model_spec(cfg.target_model)
    return isinstance(harness, SetsTemperature) and target.accepts_temperature and cfg.limits.temperature in (None, 0)


def effective_limits(cfg: RunConfig, benchmark: Benchmark, deterministic: bool = False) -> Limits:
    """The limits rollouts run with: benchmarks may ask for short answers (max tokens, stop
    sequences) unless the configuration says otherwise; deterministic rollouts run at temperature 0
    with the gate's seed."""
    limits = cfg.limits
    updates: dict[str, Any] = {"temperature": 0.0, "seed": cfg.gate.seed} if deterministic else {}
    if "max_tokens" not in cfg.limits.model_fields_set and isinstance(benchmark, ShortAnswers) \
            and benchmark.max_answer_tokens:
        updates["max_tokens"] = benchmark.max_answer_tokens
    if not limits.stop and isinstance(benchmark, StopSequences) and benchmark.stop:
        updates["stop"] = tuple(benchmark.stop)
    return limits.model_copy(update=updates)


def settings_that_matter(cfg: RunConfig, benchmark: Benchmark, harness: Harness) -> Settings:
    """The one function that says which settings make two rollouts the same (see the module docstring).
    `harness`: the run's harness (whether it can run deterministically decides the limits)."""
    name = cfg.benchmark
    if name.endswith((".jsonl", ".json")) or os.sep in name:  # a data file: named by where it is
        name = os.path.abspath(name)
    scorer = benchmark.scorer_version if isinstance(benchmark, VersionedScorer) else DEFAULT_SCORER_VERSION
    return Settings(
        # every task (`tasks("all")`), as the fingerprints of earlier runs have it; the summary's data
        # hash is `split_data_hash` (the split tasks)
        benchmark=name, data_hash=data_hash(list(benchmark.tasks("all"))), scorer_version=str(scorer),
        benchmark_options={k: v for k, v in cfg.benchmark_options.items() if k not in SCHEDULING_BENCHMARK_OPTIONS},
        harness=cfg.harness,
        harness_options={k: v for k, v in cfg.harness_options.items() if k not in SCHEDULING_HARNESS_OPTIONS},
        target_model=str(parse_model_spec(cfg.target_model)),
        limits=effective_limits(cfg, benchmark, deterministic_mode(cfg, harness)).model_dump(mode="json"),
    )


def scoring_layer(config: dict[str, Any]) -> dict[str, Any]:
    """The sections of a stored run's configuration that decide its scores (a config layer)."""
    return {k: config[k] for k in SCORING_SECTIONS if k in config}


def current_data_hash(config: dict[str, Any]) -> tuple[str, str | None]:
    """(hash of a stored run's benchmark data as it is now, None) or ("", why it could not be checked).
    Loads the benchmark; runs nothing."""
    from skillopt.benchmarks import get_benchmark
    from skillopt.config import resolve_config
    from skillopt.errors import SkilloptError

    try:
        cfg = resolve_config(scoring_layer(config))
        bench = get_benchmark(cfg.benchmark, cfg.splits, **cfg.benchmark_options)
        return split_data_hash(bench), None
    except (SkilloptError, OSError, ValueError) as e:
        return "", f"could not load benchmark {config.get('benchmark')!r} to check its data: {e}"


def data_change(config: dict[str, Any], recorded: str) -> str | None:
    """A warning when the benchmark data of a run changed since it recorded `recorded` (its data hash)."""
    if not recorded:
        return None
    now_hash, _ = current_data_hash(config)
    if now_hash and now_hash != recorded:
        return (f"the benchmark data changed since the run scored it (data hash {recorded} then, {now_hash} now): "
                f"its scores refer to the old data")
    return None
