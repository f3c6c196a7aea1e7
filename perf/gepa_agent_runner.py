"""GEPA (0.1.4, in its own virtualenv) training a skill for an agent harness: called by perf/agents.py --gepa.

GEPA drives the same agent as our finished run did through an adapter of its documented protocol
(`GEPAAdapter`: `evaluate` a candidate on a batch, `make_reflective_dataset` from its trajectories).
The candidate is one component, the skill's body (its frontmatter stays the seed's, so the harness
discovers it as it does ours); `evaluate` writes it as a SKILL.md and runs `perf/agent_job.py` in
our environment on the batch's tasks: the run's harness, harness options, target model, limits and
sandbox. The reflective dataset gives GEPA's own reflection prompt what ours reads for each rollout:
the task, the rollout's trace summary (each command with its exit code and what a failed one printed,
the tests, where the agent stopped, its final answer), the score and the scorer's feedback. The reflection
model is the run's optimizer model, served by URL. The train and val tasks are the run's, and
`max_metric_calls` is the number of rollouts our run spent before its test split.

Usage (from perf/agents.py): GEPA_VENV/bin/python perf/gepa_agent_runner.py JOB.json OUT.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMPONENT = "skill"
FEEDBACK_CHARS = 600  # of the scorer's feedback per rollout shown to GEPA's reflection


def skill_text(frontmatter: str, body: str) -> str:
    """The SKILL.md an agent is given for GEPA's candidate `body`. GEPA has no protected regions and
    rewrites the whole body, so our markers are dropped: the harness strips them before the agent reads
    the skill, and a rewrite that kept one marker of a pair would not load as a skill at all."""
    from skillopt.skill import strip_marker_comments  # the runner runs with PYTHONPATH at this repository

    return frontmatter + strip_marker_comments(body).strip() + "\n"


def main(job_path: str, out_path: str) -> None:
    import gepa
    import openai
    from gepa.core.adapter import EvaluationBatch

    job = json.loads(Path(job_path).read_text())
    work = Path(job["work"])
    work.mkdir(parents=True, exist_ok=True)
    reflection = job["reflection"]
    rclient = openai.OpenAI(base_url=reflection["base_url"], api_key="none", max_retries=3, timeout=900)
    counts = {"rollouts": 0, "errored": 0, "batches": 0, "reflection": 0}

    def skill_file(body: str) -> Path:
        path = work / "skills" / f"{counts['batches']:04d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(skill_text(job["frontmatter"], body), encoding="utf-8")
        return path

    def rollouts(body: str, ids: list[str]) -> list[dict]:
        counts["batches"] += 1
        skill = skill_file(body)
        with tempfile.TemporaryDirectory(dir=work) as tmp:
            ids_path, out = Path(tmp) / "ids.json", Path(tmp) / "out.json"
            ids_path.write_text(json.dumps(ids))
            r = subprocess.run([job["python"], str(REPO / "perf" / "agent_job.py"), job["run"], str(skill), str(ids_path),
                                str(out), "--runs", str(work / "runs")], capture_output=True, text=True)
            if r.returncode != 0 or not out.is_file():
                raise RuntimeError(f"agent_job failed ({r.returncode}): {r.stderr[-1500:]}")
            rows = json.loads(out.read_text())
        counts["rollouts"] += len(rows)
        counts["errored"] += sum(1 for x in rows if x["errored"])
        return rows

    class AgentAdapter:
        """GEPA's adapter protocol over our agent harness."""

        propose_new_texts = None  # GEPA's own reflection proposes the new text

        def evaluate(self, batch, candidate, capture_traces=False):
            rows = {x["task_id"]: x for x in rollouts(candidate[COMPONENT], [d["id"] for d in batch])}
            got = [rows.get(d["id"]) for d in batch]
            # GEPA needs a number for every example; an infrastructure error is counted apart (`errored`)
            scores = [float(x["hard"]) if x is not None and not x["errored"] else 0.0 for x in got]
            outputs = [x or {"task_id": d["id"], "errored": True} for x, d in zip(got, batch)]
            return EvaluationBatch(outputs=outputs, scores=scores, trajectories=outputs if capture_traces else None)

        def make_reflective_dataset(self, candidate, eval_batch, components_to_update):
            items = []
            for x, s in zip(eval_batch.trajectories or [], eval_batch.scores):
                if x.get("errored"):
                    continue
                items.append({
                    "Inputs": x.get("prompt", ""),
                    "Generated Outputs": x.get("summary") or x.get("trajectory", ""),
                    "Feedback": f"score {s:g} of 1. {(x.get('feedback') or '')[:FEEDBACK_CHARS]}"})
            return {c: items for c in components_to_update}

    def reflection_lm(prompt) -> str:
        counts["reflection"] += 1
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        r = rclient.chat.completions.create(model=reflection["model"], messages=messages,
                                            max_tokens=reflection["max_tokens"])
        return r.choices[0].message.content or ""

    def data(ids: list[str]) -> list[dict]:
        return [{"id": i} for i in ids]

    t0 = time.perf_counter()
    result = gepa.optimize(
        seed_candidate={COMPONENT: job["seed_body"]}, trainset=data(job["train"]), valset=data(job["val"]),
        adapter=AgentAdapter(), reflection_lm=reflection_lm, max_metric_calls=job["max_metric_calls"],
        reflection_minibatch_size=job.get("minibatch", 3), seed=job.get("seed", 0), display_progress_bar=False,
        raise_on_exception=False, run_dir=str(work / "gepa"))
    train_s = time.perf_counter() - t0
    best = result.best_candidate
    best_body = best[COMPONENT] if isinstance(best, dict) else str(best)
    tmp = Path(out_path).with_suffix(".tmp")
    tmp.write_text(json.dumps({
        "gepa_version": getattr(gepa, "__version__", "0.1.4"), "train_seconds": round(train_s, 1),
        "rollouts_optimizing": counts["rollouts"], "errored_optimizing": counts["errored"],
        "batches": counts["batches"], "reflection_calls": counts["reflection"], "candidates": len(result.candidates),
        "best_val": result.val_aggregate_scores[result.best_idx], "seed_val": result.val_aggregate_scores[0],
        "best_body": best_body, "best_skill": skill_text(job["frontmatter"], best_body),
        "changed": best_body.strip() != job["seed_body"].strip()}, indent=2))
    tmp.replace(out_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
