"""Does training make skills better on tasks they never saw? The default loop on the embedded
models, per benchmark and split seed: seed and best skill on the sealed test split, the paired
difference with its 95% interval, rollouts, wall time and validation rollouts per decision; and,
with --gepa, GEPA 0.1.4 on the same benchmark, splits, models and target-call budget.

Each of our runs is the README's main job (`skillopt run --preset quick`) with the benchmark and
split seed changed, through the real CLI, models chosen as a user with no key gets them. GEPA runs
in its own virtualenv (perf/gepa_runner.py) against the same llama.cpp servers, started here.
The gate simulation (perf/gate_sim.py) is folded in when its JSON exists.

Usage: python perf/quality.py [--benchmarks gsm8k,arc-challenge,mmlu] [--seeds 0,1,2,3,4] [--gepa | --gepa-only]
                              [--out perf/results/quality.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.common import RESULTS, asks_afresh, stop_runs_on_sigterm, write_json  # noqa: E402
from skillopt.stats import paired_difference_interval  # noqa: E402

def peer_python(peer: str) -> Path:
    """A peer (GEPA 0.1.4, DSPy 3.4.1) in its own virtualenv under the cache (perf/peer_envs.py, shared
    with perf/peers.py)."""
    sys.path.insert(0, str(REPO / "perf"))
    from peer_envs import peer_python as python_of

    return python_of(peer)


def run_ours(benchmark: str, seed: int, root: Path, extra: list[str]) -> dict:
    run_id = f"quality-{benchmark}-{seed}"
    # only the seed's rollouts may come from an earlier run, as when the rows were first measured: a
    # replayed repeat (models/replay.py) would time nothing
    args = [sys.executable, "-m", "skillopt", "--runs-dir", str(root / "runs"), "run", "--preset", "quick",
            "--benchmark", benchmark, "--split-seed", str(seed), "--run-id", run_id,
            *asks_afresh(REPO, ("replay",)), *extra]
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_AUTH_TOKEN"))}
    t0 = time.perf_counter()
    r = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    run = root / "runs" / run_id
    if r.returncode != 0 or not (run / "summary.json").exists():
        return {"benchmark": benchmark, "split_seed": seed, "error": (r.stderr or r.stdout)[-1500:]}
    return describe_run(run, benchmark, seed, wall)


def describe_run(run: Path, benchmark: str, seed: int, wall: float | None) -> dict:
    """The row of a finished run: seed and best on test, paired, the gate's evidence, the cost."""
    run_id = run.name
    summary = json.loads((run / "summary.json").read_text())
    rows = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    seed_sha = summary_sha(run, summary["versions"]["seed"])
    best_sha = summary_sha(run, summary["versions"]["best"])
    paired = paired_test_scores(rows, seed_sha, best_sha)
    decisions = summary.get("gate_decisions", 0)
    return {
        "benchmark": benchmark, "split_seed": seed, "run_id": run_id, "wall_s": None if wall is None else round(wall, 1),
        "seed_test": summary["scores"]["seed"]["test"], "best_test": summary["scores"]["best"]["test"],
        "test_delta": summary.get("test_delta"), "test_wins": summary.get("test_wins"),
        "test_losses": summary.get("test_losses"), "paired_n": len(paired[0]),
        "rollouts": len(rows), "target_calls_before_test": sum(1 for x in rows if x["split"] != "test"),
        "gate_decisions": decisions, "val_rollouts": summary.get("val_rollouts", 0),
        "val_rollouts_per_decision": round(summary.get("val_rollouts", 0) / decisions, 2) if decisions else None,
        "val_size": len({x["task_id"] for x in rows if x["split"] == "val"}),
        "candidates": summary.get("candidates", {}), "accepted": summary.get("candidates_accepted", 0),
        "best_skill": (run / "best_skill.md").read_text(),
        "optimizer_calls": summary["meter"]["roles"].get("optimizer", {}).get("calls", 0),
        **run_facts(run),
    }


def run_facts(run: Path) -> dict:
    """What --rescan re-reads from a finished run: the models, the gate's evidence, the best skill's test results."""
    summary = json.loads((run / "summary.json").read_text())
    rows = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    best_sha = summary_sha(run, summary["versions"]["best"])
    best = [x for x in rows if x["split"] == "test" and x["skill_sha"] == best_sha]
    return {"target_model": summary.get("target_model"), "optimizer_model": summary.get("optimizer_model"),
            "best_test_reply_tokens": round(sum(x["output_tokens"] for x in best) / len(best), 1) if best else None,
            "best_test_by_task": {x["task_id"]: x["hard"] for x in best if x["error_kind"] != "infra"},
            "decisions": gate_evidence(run)}


def same_run(run: Path, row: dict) -> bool:
    """Is this finished run the one the row measured? (Run ids repeat across work folders.)"""
    scores = json.loads((run / "summary.json").read_text())["scores"]
    return (scores["seed"]["test"], scores["best"]["test"]) == (row.get("seed_test"), row.get("best_test"))


def versus_peer(row: dict, peer: str = "gepa") -> dict | None:
    """Our best skill minus a peer's best prompt on the test tasks both scored, paired (Agresti-Min)."""
    ours, theirs = row.get("best_test_by_task"), (row.get(peer) or {}).get("best_test_by_task")
    if not ours or not theirs:
        return None
    common = sorted(set(ours) & set(theirs))
    a, b = [theirs[t] for t in common], [ours[t] for t in common]
    return {**paired_difference_interval(a, b).model_dump(), "ours_only": sum(y > x for x, y in zip(a, b)),
            f"{peer}_only": sum(x > y for x, y in zip(a, b))}


def gate_evidence(run: Path) -> list[dict]:
    """Every gated candidate of the run: where it came from, the val wins and losses, why it stopped."""
    out = []
    for path in sorted((run / "steps").glob("*/candidates.json")):
        doc = json.loads(path.read_text())
        for c in doc["candidates"] if isinstance(doc, dict) else doc:
            g = c.get("gate")
            if g:
                out.append({"step": path.parent.name, "origin": c.get("origin"), "accepted": g.get("accepted"),
                            "wins": g.get("wins"), "losses": g.get("losses"), "evaluated": g.get("evaluated"),
                            "candidate_score": g.get("candidate_score"), "incumbent_score": g.get("incumbent_score"),
                            "stop": g.get("stop"), "p_value": g.get("p_value")})
    return out


def summary_sha(run: Path, version: int) -> str:
    for line in (run / "skills" / "index.jsonl").read_text().splitlines():
        v = json.loads(line)
        if v["version"] == version:
            return v["sha"]
    raise KeyError(version)


def paired_test_scores(rows: list[dict], a_sha: str, b_sha: str) -> tuple[list[float], list[float]]:
    a = {x["task_id"]: x["hard"] for x in rows if x["split"] == "test" and x["skill_sha"] == a_sha and x["error_kind"] != "infra"}
    b = {x["task_id"]: x["hard"] for x in rows if x["split"] == "test" and x["skill_sha"] == b_sha and x["error_kind"] != "infra"}
    common = sorted(set(a) & set(b))
    return [a[t] for t in common], [b[t] for t in common]


def run_peer(peer: str, benchmark: str, seed: int, budget: int, root: Path) -> dict:
    """A peer's optimizer (`perf/{peer}_runner.py`: GEPA's own DefaultAdapter, or DSPy's MIPROv2) on the
    split of our run, with our models in the same roles and our target-call budget; its seed and best
    scored on the same test tasks."""
    from skillopt.benchmarks import get_benchmark
    from skillopt.config import PRESETS, resolve_config
    from skillopt.engine.training import seed_skill
    from skillopt.models.defaults import LOCAL_OPTIMIZER, LOCAL_TARGET
    from skillopt.models.local import LocalServer
    from skillopt.prompts import chat_system

    cfg = resolve_config(PRESETS["quick"], {"benchmark": benchmark, "splits": {"seed": seed}})
    bench = get_benchmark(benchmark, cfg.splits)
    seed_prompt = chat_system(seed_skill(cfg))
    max_tokens = cfg.limits.max_tokens
    # the models our no-key run defaults to, in the same roles (one server when they are the same model)
    target_name, reflection_name = LOCAL_TARGET.removeprefix("local:"), LOCAL_OPTIMIZER.removeprefix("local:")
    with contextlib.ExitStack() as stack:
        target = stack.enter_context(LocalServer(target_name, slots=cfg.train.concurrency))
        reflector = target if reflection_name == target_name else stack.enter_context(LocalServer(reflection_name))
        job = {split: [t.model_dump(mode="json") for t in bench.tasks(split)] for split in ("train", "val", "test")}
        job.update(seed_prompt=seed_prompt, max_metric_calls=budget, seed=seed, concurrency=cfg.train.concurrency,
                   run_dir=str(root / f"{peer}-{benchmark}-{seed}"),
                   target={"base_url": target.base_url + "/v1", "model": target_name, "max_tokens": max_tokens},
                   reflection={"base_url": reflector.base_url + "/v1", "model": reflection_name,
                               "max_tokens": cfg.models.optimizer_max_tokens * 2})
        job_path, out_path = root / f"{peer}-{benchmark}-{seed}.job.json", root / f"{peer}-{benchmark}-{seed}.out.json"
        root.mkdir(parents=True, exist_ok=True)  # `suite.py --gepa-only` into a fresh --work folder
        job_path.write_text(json.dumps(job))
        t0 = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        r = subprocess.run([str(peer_python(peer)), str(REPO / "perf" / f"{peer}_runner.py"), str(job_path), str(out_path)],
                           capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
    if r.returncode != 0:
        return {"error": r.stderr[-1500:]}
    out = json.loads(out_path.read_text())
    ids = sorted(out["seed_test"])
    xs, ys = [out["seed_test"][t] for t in ids], [out["best_test"][t] for t in ids]
    ci = paired_difference_interval(xs, ys)
    return {"wall_s": round(wall, 1), "budget": budget, "seed_test": sum(xs) / len(xs), "best_test": sum(ys) / len(ys),
            "test_delta": ci.model_dump(), "n": len(ids), "best_test_by_task": out["best_test"], **{k: out[k] for k in (
                "target_calls_optimizing", "reflection_calls", "candidates", "best_val", "seed_val",
                "best_prompt_chars", "best_prompt", "best_demos", "optimizer", "knobs") if k in out}}


def main() -> None:
    stop_runs_on_sigterm()
    ap = argparse.ArgumentParser()
    ap.add_argument("--benchmarks", default="gsm8k,arc-challenge,mmlu")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--gepa", action="store_true", help="also run GEPA 0.1.4 with the same budget")
    ap.add_argument("--gepa-only", action="store_true",
                    help="run GEPA 0.1.4 beside the runs already in --out (their target-call budget), ours not again")
    ap.add_argument("--set", action="append", default=[], help="extra --set for our runs")
    ap.add_argument("--out", default=str(RESULTS / "quality.json"))
    ap.add_argument("--work", default=None, help="folder for the runs (default: a new one under /tmp)")
    ap.add_argument("--rescan", action="store_true",
                    help="re-read the finished runs under --work into the JSON (wall times kept), run nothing")
    args = ap.parse_args()
    root = Path(args.work or f"/tmp/skillopt-quality-{time.strftime('%Y%m%d-%H%M%S')}")
    root.mkdir(parents=True, exist_ok=True)
    out_path = Path(args.out)
    old = json.loads(out_path.read_text()) if out_path.exists() else {}
    results = old.get("runs", [])
    extra = [x for s in args.set for x in ("--set", s)]
    if args.rescan:
        for i, row in enumerate(results):
            run = root / "runs" / str(row.get("run_id"))
            if (run / "summary.json").exists() and same_run(run, row):
                results[i] = row = {**row, **run_facts(run)}
            gepa_out = root / f"gepa-{row['benchmark']}-{row['split_seed']}.out.json"
            if row.get("gepa") and gepa_out.exists():  # the same GEPA run: the same best score on test
                best = json.loads(gepa_out.read_text())["best_test"]
                if abs(sum(best.values()) / len(best) - row["gepa"]["best_test"]) < 1e-9:
                    results[i] = {**row, "gepa": {**row["gepa"], "best_test_by_task": best}}
        write(out_path, results, machine=old.get("machine"), date=old.get("date"))  # when the runs were measured
        return
    if args.gepa_only:
        for i, row in enumerate(results):
            if "error" in row or row["benchmark"] not in args.benchmarks.split(",") \
                    or str(row["split_seed"]) not in args.seeds.split(","):
                continue
            results[i] = {**row, "gepa": run_peer("gepa", row["benchmark"], row["split_seed"],
                                                   row["target_calls_before_test"], root)}
            print(f"{row['benchmark']} seed {row['split_seed']} gepa: "
                  f"{json.dumps({k: v for k, v in results[i]['gepa'].items() if k != 'best_prompt'})[:400]}", flush=True)
            write(out_path, results, machine=old.get("machine"), date=old.get("date"))
        return
    for benchmark in args.benchmarks.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            row = run_ours(benchmark, seed, root, extra)
            d = row.get("test_delta") or {}
            print(f"{benchmark} seed {seed}: {row.get('seed_test')} -> {row.get('best_test')} "
                  f"delta {d.get('mean')} [{d.get('lo')}, {d.get('hi')}] in {row.get('wall_s')} s", flush=True)
            if args.gepa and "error" not in row:
                row["gepa"] = run_peer("gepa", benchmark, seed, row["target_calls_before_test"], root)
                print(f"  gepa: {json.dumps({k: v for k, v in row['gepa'].items() if k != 'best_prompt'})[:400]}",
                      flush=True)
            before = [r for r in results if (r.get("benchmark"), r.get("split_seed")) == (benchmark, seed)]
            if "gepa" not in row and before and "gepa" in before[0]:
                row["gepa"] = before[0]["gepa"]  # GEPA on the same split and models: not run again
            results = [r for r in results if r not in before] + [row]
            write(out_path, results)
    print(f"wrote {out_path}")


def write(path: Path, runs: list[dict], machine: dict | None = None, date: str | None = None) -> None:
    sim_path = RESULTS / "gate_sim.json"  # perf/gate_sim.py's, wherever --out writes
    sim = json.loads(sim_path.read_text()) if sim_path.exists() else None
    for row in runs:
        if "gepa" in row and "error" not in row["gepa"]:
            row["gepa"]["ours_minus_gepa"] = versus_peer(row)
    data = {
        "runs": sorted(runs, key=lambda r: (r["benchmark"], r["split_seed"])),
        "gate_simulation": None if sim is None else {
            "false_accept_no_op": {s["scenario"]: s["accept_rate"] for s in sim["scenarios"] if s["effect"] == 0},
            "power_plus_15": {s["scenario"]: s["accept_rate"] for s in sim["scenarios"] if s["effect"] == 0.15},
        },
        "machine": machine or {"cpus": os.cpu_count(), "python": platform.python_version(),
                               "platform": platform.platform(), "load_avg_at_write": os.getloadavg()},
        "date": date or time.strftime("%Y-%m-%d"),
    }
    write_json(path, data)


if __name__ == "__main__":
    main()
