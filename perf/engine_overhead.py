"""Engine overhead: rollouts/min and seconds of skillopt overhead per rollout, with an instant
fake model server, plus the rollout-cache effect of re-evaluating a scored skill.

Usage: python perf/engine_overhead.py [--tasks 200] [--concurrency 8] [--out perf/results/engine_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakes.server import FakeModelServer, FakeReply  # noqa: E402
from tests.helpers import cli_env, write_jsonl  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--out", default=str(REPO / "perf" / "results" / "engine_overhead.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        data = write_jsonl(tmp_path / "qa.jsonl", [{"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)}
                                                    for i in range(args.tasks)])
        with FakeModelServer(lambda req: FakeReply(text="Answer: 1")) as srv:
            env = cli_env(tmp_path)
            base = [sys.executable, "-m", "skillopt", "eval", "--skill", str(REPO / "skills/default/SKILL.md"),
                    "--benchmark", str(data), "--split", "all", "--harness", "chat",
                    "--target_model", f"openai-compatible:fake@{srv.openai_url}",
                    "--concurrency", str(args.concurrency)]
            t0 = time.perf_counter()
            first = subprocess.run(base, cwd=tmp_path, env=env, capture_output=True, text=True)
            t_first = time.perf_counter() - t0
            assert first.returncode == 0, first.stderr
            calls_first = len(srv.requests)
            # the same skill evaluated again in the same run folder: served by the rollout cache
            run_id = sorted(p.name for p in (tmp_path / "runs").iterdir() if p.is_dir())[0]
            t0 = time.perf_counter()
            again = subprocess.run([*base[:5], f"{run_id}:v0", *base[6:]], cwd=tmp_path, env=env,
                                   capture_output=True, text=True)
            t_again = time.perf_counter() - t0
            assert again.returncode == 0, again.stderr
            calls_again = len(srv.requests) - calls_first
    startup = _startup_s()
    result = {
        "tasks": args.tasks, "concurrency": args.concurrency,
        "wall_s": round(t_first, 3), "cli_startup_s": round(startup, 3),
        "rollouts_per_min": round(args.tasks / max(1e-9, t_first - startup) * 60, 1),
        "overhead_ms_per_rollout": round((t_first - startup) / args.tasks * 1000, 2),
        "reeval_wall_s": round(t_again, 3), "reeval_model_calls": calls_again,
        "reeval_cache_hits": args.tasks - calls_again,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def _startup_s() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "skillopt", "--version"], capture_output=True)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
