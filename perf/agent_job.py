"""A skill's rollouts on chosen tasks of a finished agent run, with that run's own settings.

What a peer optimizer needs to drive the same agent as our run did (`perf/gepa_agent_runner.py`
calls it from GEPA's own virtualenv, once for each batch GEPA evaluates): the run's benchmark,
harness, harness options, target model, limits and sandbox, the skill given as a file, the tasks
given by id. Each rollout comes back with its score, the scorer's feedback, the trace summary our
optimizer reads and the trajectory our agent-aware proposers read (commands, exit codes, what the
failed ones printed, the last test output, where the agent stopped), so that GEPA reflects on what
ours reflects on. An infrastructure error is marked `errored`: it is never a score.

Usage: python perf/agent_job.py RUN_DIR SKILL.md IDS.json OUT.json [--runs DIR]
       python perf/agent_job.py RUN_DIR --splits OUT.json      # the run's train / val / test task ids
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# what scoring a skill takes from a run's config.yaml (the rest is how it trained)
SCORING_KEYS = ("benchmark", "harness", "target_model", "splits", "limits", "harness_options", "benchmark_options",
                "sandbox")


def run_config(run: Path) -> dict[str, Any]:
    """The run's scoring settings, as a config mapping (`skillopt.evaluate(config=...)`)."""
    import yaml

    config = yaml.safe_load((run / "config.yaml").read_text()) or {}
    out = {k: config[k] for k in SCORING_KEYS if config.get(k) is not None}
    out["train"] = {"concurrency": (config.get("train") or {}).get("concurrency", 2)}
    return out


def run_benchmark(run: Path):
    from skillopt.benchmarks import get_benchmark
    from skillopt.config import resolve_config

    cfg = resolve_config(run_config(run))
    return get_benchmark(cfg.benchmark, cfg.splits, **cfg.benchmark_options)


def split_ids(run: Path) -> dict[str, list[str]]:
    """The run's train, val and test task ids (its split seed and sizes)."""
    bench = run_benchmark(run)
    return {split: [t.id for t in bench.tasks(split)] for split in ("train", "val", "test")}


class Chosen:
    """A benchmark limited to some of its tasks: every split is those tasks; the rest is the benchmark's."""

    def __init__(self, inner, ids: Sequence[str]):
        by_id = {t.id: t for t in inner.tasks("all")}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise SystemExit(f"agent_job: {len(missing)} task ids are not in {inner.name} (first: {missing[0]})")
        self._inner, self._tasks = inner, [by_id[i] for i in ids]

    def tasks(self, split="all"):
        return list(self._tasks)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def rendered(traj) -> str:
    """A trajectory in a few lines: each command with its exit code and what a failed one printed, the
    last test output, where the agent stopped, the failure kinds."""
    if traj is None:
        return "(no tool call)"
    lines = []
    for s in traj.steps:
        tag = "" if s.exit is None else f" [exit {s.exit}]"
        lines.append(f"{s.index}. {s.command}{tag}" + (f" -> {s.said}" if s.said else ""))
    if traj.test_tail:
        lines.append(f"last test output (exit {traj.test_exit}):\n{traj.test_tail}")
    if traj.diff:
        lines.append(f"diff: {traj.diff}")
    if traj.stop:
        lines.append(f"stopped: {traj.stop}")
    if traj.failure_kinds:
        lines.append("failure kinds: " + ", ".join(traj.failure_kinds))
    return "\n".join(lines)


def score(run: Path, skill: Path, ids: Sequence[str], runs: Path) -> list[dict[str, Any]]:
    """`skill`'s rollouts on `ids` with `run`'s settings: one row per task, in the order given."""
    import skillopt
    from skillopt.engine.loop import stored_trajectory
    from skillopt.store.run_store import RunStore

    bench = Chosen(run_benchmark(run), ids)
    result = skillopt.evaluate(skill, benchmark=bench, split="all", config=run_config(run), runs_dir=runs)
    store = RunStore(result.run_dir) if result.run_dir is not None else None
    by_task = {t.id: t for t in bench.tasks()}
    rows = {}
    for r in result.records:
        task = by_task[r.task_id]
        traj = stored_trajectory(store, r, task) if store is not None else None
        rows[r.task_id] = {"task_id": r.task_id, "prompt": task.prompt, "hard": r.hard, "errored": r.errored,
                           "error": r.error, "feedback": r.feedback, "summary": r.summary,
                           "trajectory": rendered(traj), "duration_s": r.duration_s}
    return [rows[i] for i in ids if i in rows]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path)
    p.add_argument("args", nargs="*", help="SKILL.md IDS.json OUT.json")
    p.add_argument("--splits", type=Path, help="write the run's train / val / test ids here, run nothing")
    p.add_argument("--runs", type=Path, default=Path("agent-job-runs"), help="where the evaluation runs go")
    a = p.parse_args()
    if a.splits:
        a.splits.write_text(json.dumps(split_ids(a.run)))
        return
    if len(a.args) != 3:
        p.error("give SKILL.md IDS.json OUT.json")
    skill, ids, out = (Path(x) for x in a.args)
    rows = score(a.run, skill, json.loads(ids.read_text()), a.runs)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(rows))
    tmp.replace(out)


if __name__ == "__main__":
    main()
