"""Run GEPA (0.1.4, in its own virtualenv) on one of our benchmarks: called by perf/quality.py.

It optimizes the chat harness's system prompt (seeded with exactly what our chat harness sends for
the seed skill) with GEPA's own DefaultAdapter, against the same target and reflection models (the
embedded llama.cpp servers, by URL), the same train / val / test tasks and the same budget of
target calls (`max_metric_calls`). Scores come from our scorers (perf/peer_job.score_reply: an
answer's scorer, or a code task's checks in the sandbox; imported from the repository: GEPA's venv
has pydantic). The seed and GEPA's best prompt are then
scored on the test split at temperature 0, as our runs are.

Usage (from perf/quality.py): GEPA_VENV/bin/python perf/gepa_runner.py JOB.json OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: no fetch of the price map


def main(job_path: str, out_path: str) -> None:
    import gepa
    import openai
    from gepa.adapters.default_adapter.default_adapter import DefaultAdapter, EvaluationResult

    from perf.peer_job import read_job, score_reply, test_scores
    from perf.peer_job import user_message as user

    job, tasks = read_job(job_path)
    by_prompt = {user(t): t for ts in tasks.values() for t in ts}
    target, reflection = job["target"], job["reflection"]
    tclient = openai.OpenAI(base_url=target["base_url"], api_key="none", max_retries=3, timeout=600)
    rclient = openai.OpenAI(base_url=reflection["base_url"], api_key="none", max_retries=3, timeout=900)
    counts = {"target": 0, "reflection": 0}
    lock = threading.Lock()

    def task_lm(messages) -> str:
        with lock:
            counts["target"] += 1
        r = tclient.chat.completions.create(model=target["model"], messages=list(messages), temperature=0.0, seed=0,
                                            max_tokens=target["max_tokens"])
        return r.choices[0].message.content or ""

    def reflection_lm(prompt) -> str:
        with lock:
            counts["reflection"] += 1
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        r = rclient.chat.completions.create(model=reflection["model"], messages=messages,
                                            max_tokens=reflection["max_tokens"])
        return r.choices[0].message.content or ""

    def evaluator(data, response: str):
        score = score_reply(by_prompt[data["input"]], response)
        return EvaluationResult(score=score.hard, feedback=score.feedback or "", objective_scores=None)

    def data(ts):
        return [{"input": user(t), "additional_context": {}, "answer": t.reference} for t in ts]

    adapter = DefaultAdapter(model=task_lm, evaluator=evaluator)
    t0 = time.perf_counter()
    result = gepa.optimize(
        seed_candidate={"system_prompt": job["seed_prompt"]}, trainset=data(tasks["train"]),
        valset=data(tasks["val"]), adapter=adapter, reflection_lm=reflection_lm,
        max_metric_calls=job["max_metric_calls"], reflection_minibatch_size=job.get("minibatch", 3),
        seed=job.get("seed", 0), display_progress_bar=False, raise_on_exception=False,
        run_dir=job.get("run_dir"))
    train_s = time.perf_counter() - t0
    best = result.best_candidate
    best_prompt = best["system_prompt"] if isinstance(best, dict) else str(best)
    optimize_calls = counts["target"]

    def scored(prompt: str) -> dict[str, float]:
        return test_scores(tasks["test"], lambda t: task_lm([{"role": "system", "content": prompt},
                                                             {"role": "user", "content": user(t)}]),
                           job.get("concurrency", 4))

    seed_test = scored(job["seed_prompt"])
    best_test = scored(best_prompt) if best_prompt != job["seed_prompt"] else dict(seed_test)
    Path(out_path).write_text(json.dumps({
        "gepa_version": getattr(gepa, "__version__", "0.1.4"), "train_seconds": round(train_s, 1),
        "target_calls_optimizing": optimize_calls, "reflection_calls": counts["reflection"],
        "candidates": len(result.candidates), "best_val": result.val_aggregate_scores[result.best_idx],
        "seed_val": result.val_aggregate_scores[0], "best_prompt": best_prompt,
        "best_prompt_chars": len(best_prompt), "seed_test": seed_test, "best_test": best_test,
    }, indent=2))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
