"""What the rules proposer writes from a stored run's failures, with the embedded model: the rules,
whether the leakage check keeps them, and the train answers each one quotes. No rollout, no gate:
a cheap look at the optimizer's side alone (the suite measures what the rules do).

Usage: python perf/rules_probe.py RUN_DIR [RUN_DIR ...] [--count 2] [--optimizer local:qwen2.5-coder-1.5b]
                                  [--split train] [--version N] [--out FILE]
`--version N`: the run's version N and its rollouts instead of the seed's (what the proposer writes
once a skill has learned something: a 3-epoch run's later steps).
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


async def probe(run: Path, count: int, optimizer: str, split: str = "train", version: int = 0) -> dict:
    from skillopt.engine.candidates import leaks
    from skillopt.optimizer.propose import SearchState
    from skillopt.optimizer.rules import RuleProposer
    from skillopt.engine.loop import scored_rollout

    opened = stored_run(run, optimizer)
    store, cfg, tasks, spec, models = opened.store, opened.cfg, opened.tasks, opened.spec, opened.models
    if split != "train":
        from skillopt.benchmarks import get_benchmark
        tasks = {t.id: t for t in get_benchmark(cfg.benchmark, cfg.splits).tasks(split)}
    from skillopt.optimizer.rules import cluster_failures, closed_labels
    from skillopt.store.scores import latest_per_trial

    seed = store.skill(version)
    mine = [r for r in store.rollouts() if r.split == split and r.version == version and r.task_id in tasks]
    scored = [scored_rollout(r, tasks[r.task_id]) for r in latest_per_trial(mine)]
    state = SearchState(step=1, version=version, skill=seed, scored=scored, tasks=tasks)
    labels = [label for label, _ in closed_labels(state.references())]
    kinds = {c.kind: len(c.failures) for c in cluster_failures(scored, labels)}
    t0 = time.monotonic()
    got = await RuleProposer(models, spec, count=count, max_tokens=cfg.models.optimizer_max_tokens).propose(state)
    shown = [tasks[t] for t in dict.fromkeys(r.task_id for r in scored)]
    return {"run": run.name, "benchmark": cfg.benchmark, "version": version, "split": split,
            f"{split}_rollouts": len(scored), "failure_kinds": kinds,
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
    ap.add_argument("--version", type=int, default=0, help="the version whose rollouts to show (default: the seed)")
    ap.add_argument("--out", default=str(RESULTS / "rules_probe.json"))
    args = ap.parse_args()
    rows = [asyncio.run(probe(Path(r), args.count, args.optimizer, args.split, args.version)) for r in args.runs]
    write_json(Path(args.out), {"machine": {"load": os.getloadavg()}, "rows": rows})
    for row in rows:
        print(json.dumps(row, indent=1)[:3000])


if __name__ == "__main__":
    main()
