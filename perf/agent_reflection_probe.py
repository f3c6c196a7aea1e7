"""What the agent-aware reflection writes from a stored agent run's failed trajectories, with the
embedded model as optimizer: the edits of the trajectory reflections (one per recurring failure kind;
`no_instruction`: code or a command alone, which a run refuses before any rollout) and of the procedure
proposer, and what the prompt showed of each failed command. No rollout, no
gate: a cheap look at the optimizer's side alone (perf/agents.py measures what a skill does).

Usage: python perf/agent_reflection_probe.py RUN_DIR [RUN_DIR ...] [--split train|val|test] [--count 2]
       [--optimizer local:qwen2.5-coder-1.5b]
RUN_DIR: a `skillopt run` or `skillopt eval` run of an agent harness (an eval run's rollouts are on its
test split; `perf/agents.py --keep DIR` keeps them). Writes perf/results/agent_reflection_probe.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.common import RESULTS, stored_run, write_json  # noqa: E402


async def probe(run: Path, split: str, count: int, optimizer: str) -> dict:
    from skillopt.benchmarks import get_benchmark
    from skillopt.engine.candidates import bare_code
    from skillopt.optimizer.agent import ProcedureProposer, TrajectoryReflectionProposer
    from skillopt.optimizer.propose import SearchState
    from skillopt.engine.loop import scored_rollout, stored_trajectory

    opened = stored_run(run, optimizer)
    store, cfg, spec, models = opened.store, opened.cfg, opened.spec, opened.models
    tasks = {t.id: t for t in get_benchmark(cfg.benchmark, cfg.splits).tasks(split)}
    seed = store.skill(0)
    scored = [scored_rollout(r, tasks[r.task_id], stored_trajectory(store, r, tasks[r.task_id]))
              for r in store.rollouts() if r.split == split and r.version == 0 and r.task_id in tasks]
    state = SearchState(step=1, version=0, skill=seed, scored=scored, tasks=tasks)
    t0 = time.monotonic()
    tokens = cfg.models.optimizer_max_tokens
    reflected = await TrajectoryReflectionProposer(models, spec, count=count, max_tokens=tokens).propose(state)
    procedure = await ProcedureProposer(models, spec, max_tokens=tokens).propose(state)
    failed = [r for r in scored if r.failed and r.trajectory is not None]
    return {"run": run.name, "benchmark": cfg.benchmark, "harness": cfg.harness, "split": split,
            "rollouts": len(scored), "failed_with_trajectory": len(failed), "optimizer": optimizer,
            "wall_s": round(time.monotonic() - t0, 1),
            "failed_commands_said": sorted({s.said for r in failed for s in r.trajectory.steps if s.said})[:10],
            "reflections": [{"focus_and_analysis": c.rationale, "edit": c.edits[0].text,
                             "no_instruction": bare_code(c.edits[0].text)} for c in reflected.candidates],
            "procedure": [c.edits[0].text for c in procedure.candidates],
            "errors": [r.error for r in [*reflected.reflections, *procedure.reflections] if r.error]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--split", default="train", choices=("train", "val", "test"))
    ap.add_argument("--count", type=int, default=2)
    ap.add_argument("--optimizer", default="local:qwen2.5-coder-1.5b")
    ap.add_argument("--out", default=str(RESULTS / "agent_reflection_probe.json"))
    args = ap.parse_args()
    rows = [asyncio.run(probe(Path(r), args.split, args.count, args.optimizer)) for r in args.runs]
    write_json(Path(args.out), {"machine": {"load": os.getloadavg()}, "rows": rows})
    for row in rows:
        print(json.dumps(row, indent=1)[:4000])


if __name__ == "__main__":
    main()
