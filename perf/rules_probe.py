"""What the rules proposer writes from a stored run's failures, with the embedded model: the rules,
whether the leakage check keeps them, and the train answers each one quotes. No rollout, no gate:
a cheap look at the optimizer's side alone (the suite measures what the rules do).

Usage: python perf/rules_probe.py RUN_DIR [RUN_DIR ...] [--count 2] [--optimizer local:qwen2.5-coder-1.5b]
                                  [--split train]
Writes perf/results/rules_probe.json.
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


async def probe(run: Path, count: int, optimizer: str, split: str = "train") -> dict:
    from skillopt.engine.candidates import leaks
    from skillopt.optimizer.propose import SearchState
    from skillopt.optimizer.rules import RuleProposer
    from skillopt.engine.loop import scored_rollout

    opened = stored_run(run, optimizer)
    store, cfg, tasks, spec, models = opened.store, opened.cfg, opened.tasks, opened.spec, opened.models
    if split != "train":
        from skillopt.benchmarks import get_benchmark
        tasks = {t.id: t for t in get_benchmark(cfg.benchmark, cfg.splits).tasks(split)}
    seed = store.skill(0)
    scored = [scored_rollout(r, tasks[r.task_id]) for r in store.rollouts()
              if r.split == split and r.version == 0 and r.task_id in tasks]
    state = SearchState(step=1, version=0, skill=seed, scored=scored, tasks=tasks)
    t0 = time.monotonic()
    got = await RuleProposer(models, spec, count=count, max_tokens=cfg.models.optimizer_max_tokens).propose(state)
    shown = [tasks[t] for t in dict.fromkeys(r.task_id for r in scored)]
    return {"run": run.name, "benchmark": cfg.benchmark, "split": split, f"{split}_rollouts": len(scored),
            "failures": sum(1 for r in scored if r.failed), "optimizer": optimizer,
            "wall_s": round(time.monotonic() - t0, 1),
            "rules": [{"text": c.edits[0].text, "why": c.rationale, "leakage": [str(f) for f in leaks(c, c.edits, shown, seed)]}
                      for c in got.candidates],
            "not_rules": [r.error for r in got.reflections if r.error]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--count", type=int, default=2)
    ap.add_argument("--optimizer", default="local:qwen2.5-coder-1.5b")
    ap.add_argument("--split", default="train", help="whose seed rollouts to show (val: a development probe "
                                                     "only; a run never shows validation to the optimizer)")
    ap.add_argument("--out", default=str(RESULTS / "rules_probe.json"))
    args = ap.parse_args()
    rows = [asyncio.run(probe(Path(r), args.count, args.optimizer, args.split)) for r in args.runs]
    write_json(Path(args.out), {"machine": {"load": os.getloadavg()}, "rows": rows})
    for row in rows:
        print(json.dumps(row, indent=1)[:3000])


if __name__ == "__main__":
    main()
