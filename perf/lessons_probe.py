"""What the lesson prompt gets out of the embedded model on a stored run's contrasts: a train task the
seed skill failed, beside a reply to the same task that the scorer accepted later in the run (a screen
or gate rollout under another skill version). No rollout, no gate: a look at the optimizer's side alone
(the suite's `lessons` arms measure what lessons do); in a run the solving reply is the teacher's.

Usage: python perf/lessons_probe.py RUN_DIR [RUN_DIR ...] [--pairs 4] [--optimizer local:qwen2.5-coder-1.5b]
Writes perf/results/lessons_probe.json.
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


async def probe(run: Path, pairs: int, optimizer: str) -> dict:
    from skillopt.optimizer.lessons import lesson_of
    from skillopt.engine.loop import scored_rollout

    opened = stored_run(run, optimizer)
    store, cfg, tasks, spec, models = opened.store, opened.cfg, opened.tasks, opened.spec, opened.models
    rollouts = list(store.rollouts())
    failed = {r.task_id: r for r in rollouts if r.split == "train" and r.version == 0 and r.hard < 1 and not r.error
              and r.task_id in tasks}
    solved: dict[str, str] = {}
    for r in rollouts:
        if r.task_id in failed and r.hard >= 1 and r.task_id not in solved:
            solved[r.task_id] = r.output
    skill = store.skill(0).render()
    rows = []
    for tid in list(solved)[:pairs]:
        r = failed[tid]
        bad = scored_rollout(r, tasks[tid])
        t0 = time.monotonic()
        lesson, what = await lesson_of(models, spec, skill, tasks[tid], bad, solved[tid],
                                       max_tokens=cfg.models.optimizer_max_tokens, temperature=0.0)
        rows.append({"task": tid, "lesson": lesson, "what": what, "wall_s": round(time.monotonic() - t0, 1)})
    return {"run": run.name, "benchmark": cfg.benchmark, "seed_failed_train": len(failed),
            "solved_later": len(solved), "optimizer": optimizer, "lessons": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--optimizer", default="local:qwen2.5-coder-1.5b")
    ap.add_argument("--out", default=str(RESULTS / "lessons_probe.json"))
    args = ap.parse_args()
    rows = [asyncio.run(probe(Path(r), args.pairs, args.optimizer)) for r in args.runs]
    write_json(Path(args.out), {"machine": {"load": os.getloadavg()}, "command": " ".join(sys.argv), "rows": rows})
    for row in rows:
        print(json.dumps(row, indent=1)[:3000])


if __name__ == "__main__":
    main()
