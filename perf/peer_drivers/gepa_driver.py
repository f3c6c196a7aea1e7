"""Runs GEPA 0.1.4 inside its own venv (see perf/peer_envs.py) for perf/peers.py: an evaluation of a
QA file with GEPA's DefaultAdapter, or a short optimisation with `gepa.optimize`.

The model server comes from the environment LiteLLM reads (OPENAI_BASE_URL, OPENAI_API_KEY), with
LITELLM_LOCAL_MODEL_COST_MAP=True so LiteLLM does not fetch its price list (offline).

Usage: python gepa_driver.py eval DATA.jsonl SKILL.md --workers 8
       python gepa_driver.py optimize DATA.jsonl SKILL.md --train 8 --val 20 --proposals 2 --run-dir DIR
Prints one JSON line: {"n": ..., "score": ..., "proposals": ..., "accepted": ...}.
"""

from __future__ import annotations

import argparse
import json


def load(path: str) -> list[dict]:
    rows = [json.loads(x) for x in open(path, encoding="utf-8") if x.strip()]
    return [{"input": r["question"], "additional_context": {}, "answer": str(r["answer"])} for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["eval", "optimize"])
    ap.add_argument("data")
    ap.add_argument("skill")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--train", type=int, default=8)
    ap.add_argument("--val", type=int, default=20)
    ap.add_argument("--proposals", type=int, default=2)
    ap.add_argument("--minibatch", type=int, default=4)
    ap.add_argument("--run-dir", default=None)
    args = ap.parse_args()
    from gepa.adapters.default_adapter.default_adapter import DefaultAdapter

    data, skill = load(args.data), open(args.skill, encoding="utf-8").read()
    adapter = DefaultAdapter(model="openai/fake-target", max_litellm_workers=args.workers)
    if args.mode == "eval":
        out = adapter.evaluate(data, {"system_prompt": skill})
        print(json.dumps({"n": len(out.scores), "score": sum(out.scores) / max(1, len(out.scores))}))
        return
    import gepa
    from gepa.utils.stop_condition import MaxCandidateProposalsStopper

    result = gepa.optimize(
        seed_candidate={"system_prompt": skill}, trainset=data[: args.train],
        valset=data[args.train : args.train + args.val], adapter=adapter, reflection_lm="openai/fake-opt",
        reflection_minibatch_size=args.minibatch, stop_callbacks=[MaxCandidateProposalsStopper(args.proposals)],
        run_dir=args.run_dir, display_progress_bar=False, seed=0)
    print(json.dumps({"n": args.train + args.val, "candidates": len(result.candidates),
                      "proposals": args.proposals, "accepted": len(result.candidates) - 1,
                      "best_score": max(result.val_aggregate_scores)}))


if __name__ == "__main__":
    main()
