"""The scoring service: the rollouts of a skill on some splits, reusing every rollout any run
already paid for. `compare` calls it for skill files (and `eval` runs the same evaluation run);
report/ only reads what it recorded.

A rollout is reused when its cache key (skill content, task content, trial, and the settings that
matter: `skillopt.engine.settings`) matches one recorded in any run under the runs folder; only the
missing ones are run, as an evaluation run (`skillopt.engine.evaluate.evaluate_skill`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from skillopt.benchmarks import get_benchmark
from skillopt.benchmarks.base import Benchmark, Task, split_data_hash
from skillopt.config import RunConfig
from skillopt.engine.events import Listener
from skillopt.engine.settings import settings_that_matter
from skillopt.harness.registry import HarnessContext, make_harness
from skillopt.models import Models
from skillopt.models.types import ProviderEnv
from skillopt.store.layout import rollout_files
from skillopt.store.schema import RolloutRecord
from skillopt.store.refs import SkillRef
from skillopt.store.run import RunStore


class _KeyOnly(BaseModel):
    """A rollouts.jsonl line read for its cache key alone (the rest is skipped, not built)."""

    model_config = ConfigDict(extra="ignore")
    key: str = ""


@dataclass(frozen=True)
class ScoredSkill:
    """A skill's rollouts by split (a scored one per task and trial, else its errored one), and what
    scoring them cost."""

    sha: str
    records: dict[str, list[RolloutRecord]]
    cached: int  # rollouts reused from earlier runs
    new: int  # rollouts run by this call
    data_hash: str  # of the benchmark's data as it is now


def find_rollouts(runs_dir: Path, keys: set[str],
                  errored: dict[str, RolloutRecord] | None = None) -> dict[str, tuple[str, RolloutRecord]]:
    """Scored rollouts with these cache keys in any run under `runs_dir`: key -> (run id, record).
    `errored`, when given, receives the last errored rollout of each key (counted apart, never a score)."""
    found: dict[str, tuple[str, RolloutRecord]] = {}
    if not keys:
        return found
    for run_id, path in rollout_files(runs_dir):
        with path.open(encoding="utf-8") as f:
            for line in f:
                try:  # the key first (a cheap parse); the record only for a wanted key
                    key = _KeyOnly.model_validate_json(line).key
                    if key not in keys or (key in found and errored is None):
                        continue
                    rec = RolloutRecord.model_validate_json(line)
                except ValueError:
                    continue  # a torn last line of an interrupted run
                if rec.key in keys and rec.key not in found and not rec.errored:  # errored: run again
                    found[rec.key] = (run_id, rec)
                elif errored is not None and rec.key in keys and rec.errored:
                    errored[rec.key] = rec
    return found


def score_skill(ref: SkillRef, cfg: RunConfig, splits: Sequence[str], runs_dir: Path, env: ProviderEnv,
                listeners: list[Listener], benchmark: Benchmark | None = None) -> ScoredSkill:
    """The rollouts of a skill file on each split: reused where any run has them, run otherwise.
    `benchmark`: one built in Python instead of `cfg.benchmark` by name."""
    skill = ref.skill
    bench = benchmark if benchmark is not None else get_benchmark(cfg.benchmark, cfg.splits, **cfg.benchmark_options)
    harness = make_harness(cfg.harness, HarnessContext(models=Models(env=env), options=dict(cfg.harness_options)))
    settings, trials = settings_that_matter(cfg, bench, harness), cfg.gate.trials
    wanted: dict[str, dict[str, tuple[str, int]]] = {}  # split -> key -> (task id, trial)
    all_tasks: list[Task] = []
    for split in splits:
        tasks = list(bench.tasks(split))  # type: ignore[arg-type]
        all_tasks += tasks
        wanted[split] = {settings.rollout_key(skill.sha, t, k): (t.id, k) for t in tasks for k in range(trials)}
    keys = {k for w in wanted.values() for k in w}
    found = find_rollouts(runs_dir, keys)
    cached = len(found)
    failed: dict[str, RolloutRecord] = {}
    missing = [s for s in splits if any(k not in found for k in wanted[s])]
    if missing:
        from skillopt.engine.evaluate import evaluate_skill

        source = _best_source(runs_dir, found)
        eval_cfg = cfg.model_copy(update={"run_id": None})
        for split in missing:  # what the evaluation runs recorded: no second scan of every run
            result = evaluate_skill(eval_cfg, SkillRef(skill, ref.label, source), split, runs_dir, env, listeners,
                                    benchmark=benchmark)
            for rec in result.records:
                if rec.key in keys and rec.key not in found:
                    if rec.errored:
                        failed[rec.key] = rec
                    else:
                        found[rec.key] = (result.run_id, rec)
                        failed.pop(rec.key, None)
    # a scored rollout per key; where none, its errored one (compare counts it apart, never scores it)
    records = {s: [(found[k][1] if k in found else failed[k]).model_copy(update={"split": s})
                   for k in w if k in found or k in failed] for s, w in wanted.items()}
    return ScoredSkill(skill.sha, records, cached, len(found) - cached, split_data_hash(bench))


def _best_source(runs_dir: Path, found: dict[str, tuple[str, RolloutRecord]]) -> RunStore | None:
    """The run holding the most of the reusable rollouts (the evaluation run preloads its cache)."""
    counts: dict[str, int] = {}
    for run_id, _ in found.values():
        counts[run_id] = counts.get(run_id, 0) + 1
    if not counts:
        return None
    best = max(counts, key=lambda r: counts[r])
    return RunStore(runs_dir / best)
