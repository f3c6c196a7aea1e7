"""How long the README's main job takes, and where the time goes (issue 27).

`python perf/quick_time.py --state idle` runs `skillopt run --preset quick` through the real CLI, as a
new user would (no key: the embedded 1.5B as target and optimizer; empty rollout and reply caches, as a
first run has), and records its wall time, the machine's load before and after, and each phase
of the run read from its own files: when it started and ended, its rollouts, their prompt and
generated tokens. `--state one-core-busy` runs it beside a process that keeps one CPU busy (started
here, stopped by its PID). `--repeat` also times the same command run a second time (what a user who runs it
again waits: since the embedded model's rollouts and replies are kept across runs, models/replay.py,
it replays the first run; before, only the seed's rollouts came from the cache).

The rows go to perf/results/quick_time.json (`runs`); the README's time range is generated from them,
with the floor the measured generation rate sets (perf/local_model.py --limit).

Usage: python perf/quick_time.py --state idle|one-core-busy [--code CHECKOUT] [--repeat]
       python perf/quick_time.py --record RUN_DIR --wall-s S --state idle --at COMMIT
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.common import RESULTS, commit, machine, stop_runs_on_sigterm, uptime, write_json  # noqa: E402
from skillopt.io.files import read_jsonl  # noqa: E402

OUT = RESULTS / "quick_time.json"
STATES = ("idle", "one-core-busy")


def phases(run: Path) -> list[dict]:
    """The run's phases in the order they ran, from its rollouts: the baseline on validation, the
    step's train rollouts, the screens, the gate, the two test scorings; and the optimizer's time
    (the gap between the train rollouts and the first screen, when it proposes)."""
    rows = list(read_jsonl(run / "rollouts.jsonl"))
    if not rows:
        return []
    t0 = min(r["created_at"] - r["duration_s"] for r in rows)

    def name(r: dict) -> str:
        v, split = r["version"], r["split"]
        if split == "test":
            return "test, seed skill" if v == 0 else "test, best skill"
        if split == "val":
            return "baseline on validation" if v == 0 else "gate on validation"
        return "train rollouts" if v == 0 else "screens"

    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(name(r), []).append(r)
    out = []
    for label, rs in groups.items():
        start = min(r["created_at"] - r["duration_s"] for r in rs) - t0
        end = max(r["created_at"] for r in rs) - t0
        out.append({"phase": label, "start_s": round(start, 1), "end_s": round(end, 1), "rollouts": len(rs),
                    "prompt_tokens": sum(r["input_tokens"] for r in rs),
                    "generated_tokens": sum(r["output_tokens"] for r in rs),
                    "generated_per_rollout": round(sum(r["output_tokens"] for r in rs) / len(rs), 1)})
    out.sort(key=lambda p: p["start_s"])
    train = next((p for p in out if p["phase"] == "train rollouts"), None)
    after = [p for p in out if train and p["start_s"] >= train["end_s"]]
    if train and after:
        calls = [c for c in read_jsonl(run / "calls.jsonl") if c.get("role") == "optimizer"]
        out.append({"phase": "optimizer proposing", "start_s": train["end_s"], "end_s": after[0]["start_s"],
                    "calls": len(calls), "prompt_tokens": sum(c.get("input_tokens") or 0 for c in calls),
                    "generated_tokens": sum(c.get("output_tokens") or 0 for c in calls)})
        out.sort(key=lambda p: p["start_s"])
    for p in out:
        p["seconds"] = round(p["end_s"] - p["start_s"], 1)
    return out


def rollouts_run(rows: list[dict]) -> int:
    """Rollouts this run made (one reused from the seed cache carries no tokens)."""
    return sum(1 for r in rows if r["output_tokens"] or r["input_tokens"])


def describe(run: Path, wall: float, state: str, code: str, extra: dict) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    rows = list(read_jsonl(run / "rollouts.jsonl"))
    scores = summary["scores"]
    ph = phases(run)
    return {"state": state, "wall_s": round(wall, 1), "minutes": round(wall / 60, 1), "code": code,
            "run_id": run.name, "rollouts": len(rows),
            "rollouts_run": rollouts_run(rows),
            "generated_tokens": sum(r["output_tokens"] for r in rows),
            "prompt_tokens": sum(r["input_tokens"] for r in rows),
            "optimizer_generated_tokens": sum(p.get("generated_tokens", 0) for p in ph
                                              if p["phase"] == "optimizer proposing"),
            "seed_test": scores["seed"]["test"]["hard"], "best_test": scores["best"]["test"]["hard"],
            "test_delta": summary.get("test_delta"), "test_wins": summary.get("test_wins"),
            "test_losses": summary.get("test_losses"), "accepted": summary.get("candidates_accepted"),
            "phases": ph, **extra}


class Burner:
    """One process that keeps one CPU busy (a shell loop at normal priority), stopped by its PID."""

    def __enter__(self):
        self.proc = subprocess.Popen(["sh", "-c", "while :; do :; done"])
        time.sleep(5)  # let the load average see it before the run picks its threads
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def fresh_cache(root: Path) -> Path:
    """A cache folder with no kept rollouts (a first run's) and the embedded models of this machine's
    cache (a link: nothing is copied)."""
    from skillopt.models.local.registry import default_cache_dir

    cache = root / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    if not (cache / "models").exists():
        default_cache_dir().mkdir(parents=True, exist_ok=True)  # a fresh machine has none yet: the run writes it
        (cache / "models").symlink_to(default_cache_dir())
    return cache


def run_once(code: Path, root: Path, run_id: str) -> tuple[Path, float]:
    """The README's main job in `root`, with the seed-rollout cache in `root` (empty for the first run)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_AUTH_TOKEN", "_BASE_URL"))}
    env.update(PYTHONPATH=str(code), SKILLOPT_CACHE_DIR=str(fresh_cache(root)))
    argv = [sys.executable, "-m", "skillopt", "--runs-dir", str(root / "runs"), "run", "--preset", "quick",
            "--run-id", run_id]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"the run failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-800:]}")
    return root / "runs" / run_id, wall


def main() -> None:
    stop_runs_on_sigterm()
    ap = argparse.ArgumentParser()
    ap.add_argument("--state", choices=STATES, required=True)
    ap.add_argument("--code", type=Path, default=REPO, help="the checkout whose skillopt runs")
    ap.add_argument("--label", default="", help="what this code is (a setting compared, 'before' / 'after')")
    ap.add_argument("--repeat", action="store_true", help="then the same command again, the caches the first run filled on")
    ap.add_argument("--work", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--record", type=Path, default=None, metavar="RUN_DIR",
                    help="add a finished run made by hand with this script's command line (--wall-s, --at)")
    ap.add_argument("--wall-s", type=float, default=None)
    ap.add_argument("--at", default=None, help="with --record: the commit it ran")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    doc = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": []}
    base = {"machine": machine(), "label": args.label,
            "command": f"python perf/quick_time.py --state {args.state}" + (" --repeat" if args.repeat else "")}
    if args.record:
        if args.wall_s is None or not args.at:
            sys.exit("--record needs --wall-s (the run's wall time) and --at COMMIT")
        doc["runs"].append(describe(args.record, args.wall_s, args.state, args.at,
                                    {**base, "recorded_from": str(args.record)}))
        write_json(args.out, doc)
        return
    head, clean = commit(args.code, ("skillopt", "prompts", "skills"))  # the code the run ran
    at = head[:7] + ("" if clean else "-dirty")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.work or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%H%M%S")
        with Burner() if args.state == "one-core-busy" else contextlib.nullcontext():
            before = uptime()
            run, wall = run_once(args.code, root, f"quick-{args.state}-{stamp}")
            row = describe(run, wall, args.state, at, {**base, "uptime": [before, uptime()]})
            if args.repeat:
                again, wall2 = run_once(args.code, root, f"quick-{args.state}-{stamp}-again")
                meter = json.loads((again / "summary.json").read_text())["meter"]
                rows = list(read_jsonl(again / "rollouts.jsonl"))
                row["repeated"] = {"wall_s": round(wall2, 1), "uptime": uptime(), "rollouts": len(rows),
                                   "rollouts_run": rollouts_run(rows),
                                   "model_calls": sum(r.get("calls", 0) for r in meter["roles"].values()),
                                   "replayed_calls": sum(r.get("cached_calls", 0) for r in meter["roles"].values()),
                                   "same_best_skill": (again / "best_skill.md").read_text() ==
                                   (run / "best_skill.md").read_text()}
    doc["runs"].append(row)
    write_json(args.out, doc)
    print(json.dumps({k: v for k, v in row.items() if k != "phases"}), flush=True)
    for p in row["phases"]:
        print(json.dumps(p), flush=True)


if __name__ == "__main__":
    main()
