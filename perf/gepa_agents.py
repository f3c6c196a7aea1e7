"""GEPA beside a finished agent training run: the same agent, tasks, models and rollout budget.

`perf/agents.py --gepa RUN_DIR` calls `beside`: GEPA 0.1.4 (its own virtualenv, `perf/peer_envs.py`)
trains the skill's body from the run's seed with `perf/gepa_agent_runner.py` on the run's train and
val tasks, within the rollouts our run spent before its test split; its best skill is then scored on
the run's test tasks (`perf/agent_job.py`, the run's settings), and paired per task with the run's
own seed and best test rollouts (`skillopt.stats.paired_lift`, the one paired comparison).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skillopt.store.schema import RolloutRecord

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def split_frontmatter(text: str) -> tuple[str, str]:
    """A SKILL.md's frontmatter (with its closing line) and its body."""
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end >= 0:
            return text[: end + 5], text[end + 5:]
    return "", text


def run_rollouts(run: Path) -> list[RolloutRecord]:
    from skillopt.io.files import read_records
    from skillopt.store.schema import RolloutRecord

    return list(read_records(run / "rollouts.jsonl", RolloutRecord))


def budget_of(rows: list[RolloutRecord]) -> int:
    """The rollouts the run spent training (every split but test; an infrastructure error spent none)."""
    return sum(1 for r in rows if r.split != "test" and not r.errored)


def test_scores(rows: list[RolloutRecord], version: int) -> dict[str, float]:
    """Per test task, the mean hard score of `version`'s scored rollouts (infrastructure errors left out)."""
    from skillopt.store.scores import per_task

    return per_task([r for r in rows if r.split == "test" and r.version == version], "hard")


def paired(a: dict[str, float], b: dict[str, float]) -> dict:
    from skillopt.stats import paired_lift

    lift = paired_lift(a, b)
    if lift is None:
        return {"n": 0}
    i = lift.interval
    return {"n": i.n, "delta": i.mean, "ci_low": i.lo, "ci_high": i.hi, "wins": lift.wins, "losses": lift.losses,
            "ties": lift.ties, "verdict": lift.verdict}


def beside(run: Path, work: Path) -> dict:
    """GEPA on `run`'s task split and budget; its test scores paired with the run's seed and best."""
    import yaml

    from perf.agent_job import score, split_ids
    from perf.agents import options_of
    from perf.peer_envs import PEERS, peer_python
    from skillopt.models.local import LocalServer
    from skillopt.models.spec import parse_model_spec

    config = yaml.safe_load((run / "config.yaml").read_text()) or {}
    optimizer = parse_model_spec(str(config.get("optimizer_model") or ""))
    if optimizer.provider not in ("local", "openai-compatible", "vllm") or (optimizer.provider != "local"
                                                                          and not optimizer.base_url):
        raise SystemExit(f"--gepa: the run's optimizer is {optimizer}; GEPA's reflection is given a local: model or "
                         "a served one (openai-compatible:NAME@URL, vllm:NAME@URL)")
    rows = run_rollouts(run)
    summary = json.loads((run / "summary.json").read_text())
    best_version = int((summary.get("versions") or {}).get("best", 0))
    ids = split_ids(run)
    frontmatter, body = split_frontmatter((run / "skills" / "v000.md").read_text())
    work.mkdir(parents=True, exist_ok=True)
    job_path, out_path = work / "gepa.job.json", work / "gepa.out.json"
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if optimizer.provider == "local":
            base_url = stack.enter_context(LocalServer(optimizer.model)).base_url + "/v1"
        else:
            base_url = str(optimizer.base_url)
        job = {"run": str(run.resolve()), "python": sys.executable, "work": str(work.resolve()),
               "train": ids["train"], "val": ids["val"], "frontmatter": frontmatter, "seed_body": body,
               "max_metric_calls": budget_of(rows), "minibatch": 3, "seed": 0,
               "reflection": {"base_url": base_url, "model": optimizer.model,
                              "max_tokens": int((config.get("models") or {}).get("optimizer_max_tokens") or 2048)}}
        job_path.write_text(json.dumps(job, indent=2))
        env = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        r = subprocess.run([str(peer_python("gepa")), str(REPO / "perf" / "gepa_agent_runner.py"), str(job_path),
                            str(out_path)], env=env)
    if r.returncode != 0:
        raise SystemExit(f"GEPA's run failed ({r.returncode}); its job is {job_path}")
    out = json.loads(out_path.read_text())
    train_s = time.perf_counter() - t0
    seed, ours = test_scores(rows, 0), test_scores(rows, best_version)
    test_ids = sorted(seed)
    if out["changed"]:
        skill = work / "gepa_best_skill.md"
        skill.write_text(out["best_skill"], encoding="utf-8")
        scored = score(run, skill, test_ids, work / "runs")
        gepa = {x["task_id"]: float(x["hard"]) for x in scored if not x["errored"]}
    else:
        gepa = dict(seed)  # GEPA kept the seed: its test rollouts are the seed's
    mean = lambda d: round(sum(d.values()) / len(d), 6) if d else None  # noqa: E731
    return {"harness": config.get("harness"), "benchmark": config.get("benchmark"),
            "split_seed": int((config.get("splits") or {}).get("seed") or 0), "run": run.name,
            "target": config.get("target_model"), "options": options_of(config), "optimizer": str(optimizer),
            "peer": f"gepa {PEERS['gepa'].version}",
            "budget_rollouts": job["max_metric_calls"], "seed_test": mean(seed), "gepa_test": mean(gepa),
            "ours_test": mean(ours), "gepa_vs_seed": paired(seed, gepa), "ours_vs_gepa": paired(gepa, ours),
            "wall_s": round(time.perf_counter() - t0, 1), "gepa_train_s": round(train_s, 1),
            **{k: out[k] for k in ("rollouts_optimizing", "errored_optimizing", "reflection_calls", "candidates",
                                   "seed_val", "best_val", "changed", "best_body")}}
