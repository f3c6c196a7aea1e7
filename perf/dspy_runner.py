"""Run DSPy's MIPROv2 (DSPy 3.4.1, in its own virtualenv) on one of our benchmarks: called by
perf/quality.py, with the job GEPA's runner takes.

The program is one `dspy.Predict` of `question -> answer` whose instructions are exactly what our
chat harness sends for the seed skill; DSPy then formats its calls its own way (its ChatAdapter's
field markers) and MIPROv2 searches instructions (proposed by the reflection model) and few-shot
demonstrations (the train tasks' labels, and the target's own solved train tasks) together.

The budget is target calls, as for GEPA. MIPROv2 takes no budget: its knobs are set from it, and
what it spent is counted at the client and reported. Three candidate sets (zero-shot, labeled
demos, one bootstrapped set: at most one call per train task), a validation subset V' scored once
for the seed program and once for the best trial, and T trials of minibatches of M:
    V' = min(val, max(M, (budget - train - M) // 2)),  T = max(1, (budget - train - 2 V') // M).
Scores come from our scorers (perf/peer_job.score_reply on the `answer` field); a reply DSPy
cannot parse scores 0, as an unparsed reply does in our runs. The seed and the best program are
then scored on the test split at temperature 0.

Usage (from perf/quality.py): DSPY_VENV/bin/python perf/dspy_runner.py JOB.json OUT.json
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
os.environ.setdefault("DSPY_CACHEDIR", str(Path(os.environ.get("TMPDIR", "/tmp")) / "skillopt-dspy-cache"))


def knobs(budget: int, train: int, val: int, minibatch: int = 8) -> dict[str, int]:
    """MIPROv2's settings for a budget of target calls (see the module's docstring)."""
    m = max(1, min(minibatch, val))
    v = min(val, max(m, (budget - train - m) // 2))
    return {"val": v, "minibatch": min(m, v), "trials": max(1, (budget - train - 2 * v) // m)}


def main(job_path: str, out_path: str) -> None:
    import dspy

    from perf.peer_job import read_job, score_reply, test_scores
    from perf.peer_job import user_message as user
    from skillopt.benchmarks.base import Task

    job, tasks = read_job(job_path)
    by_question = {user(t): t for ts in tasks.values() for t in ts}
    counts = {"target": 0, "reflection": 0}
    lock = threading.Lock()

    class Counted(dspy.LM):
        """An LM that counts its calls (DSPy's own cache is off: every call reaches the server)."""

        def __init__(self, role: str, spec: dict, **kw):
            super().__init__(f"openai/{spec['model']}", api_base=spec["base_url"], api_key="none", cache=False,
                             max_tokens=spec["max_tokens"], num_retries=3, timeout=900, **kw)
            self.role = role

        def forward(self, *args, **kwargs):
            with lock:
                counts[self.role] += 1
            return super().forward(*args, **kwargs)

    target = Counted("target", job["target"], temperature=0.0)
    reflection = Counted("reflection", job["reflection"], temperature=0.7)
    dspy.configure(lm=target)

    def examples(ts: list[Task]) -> list:
        return [dspy.Example(question=user(t), answer=t.reference).with_inputs("question") for t in ts]

    def metric(example, prediction, trace=None) -> float:
        return score_reply(by_question[example.question], getattr(prediction, "answer", "") or "").hard

    seed_program = dspy.Predict(dspy.Signature("question -> answer", job["seed_prompt"]))
    k = knobs(job["max_metric_calls"], len(tasks["train"]), len(tasks["val"]))
    optimizer = dspy.MIPROv2(metric=metric, prompt_model=reflection, task_model=target, auto=None, num_candidates=3,
                             max_bootstrapped_demos=2, max_labeled_demos=2, num_threads=job.get("concurrency", 4),
                             max_errors=10**6, seed=job.get("seed", 0), verbose=False)
    t0 = time.perf_counter()
    best = optimizer.compile(seed_program, trainset=examples(tasks["train"]), valset=examples(tasks["val"][:k["val"]]),
                             num_trials=k["trials"], minibatch=True, minibatch_size=k["minibatch"],
                             minibatch_full_eval_steps=max(1, k["trials"]))
    train_s = time.perf_counter() - t0
    optimize_calls, reflection_calls = counts["target"], counts["reflection"]

    def scored(program) -> dict[str, float]:
        def answer(t: Task) -> str:
            try:
                return program(question=user(t)).answer or ""
            except Exception:  # DSPy could not parse the reply: no answer
                return ""

        return test_scores(tasks["test"], answer, job.get("concurrency", 4))

    predictor = best.predictors()[0]
    instructions = predictor.signature.instructions
    demos = [{"question": d.get("question", ""), "answer": d.get("answer", "")} for d in predictor.demos]
    Path(out_path).write_text(json.dumps({
        "dspy_version": dspy.__version__, "optimizer": "MIPROv2", "knobs": k, "train_seconds": round(train_s, 1),
        "target_calls_optimizing": optimize_calls, "reflection_calls": reflection_calls,
        "best_val": getattr(best, "score", None), "best_prompt": instructions, "best_demos": demos,
        "best_prompt_chars": len(instructions) + sum(len(d["question"]) + len(d["answer"]) for d in demos),
        "seed_test": scored(seed_program), "best_test": scored(best),
    }, indent=2))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
