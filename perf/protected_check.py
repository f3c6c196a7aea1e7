"""Whether a run's protected check (engine/protected.py) names a protected region that makes the target fail.

Per family, split seed and skill file: the README's main job (`skillopt run --preset quick`, the embedded
1.5B) with that skill as the seed, no candidate proposed (the check runs at the first step, before any
proposal), one validation task and no test split (neither is read; the train split is the quick preset's,
drawn first). The row is what the run's summary says of each protected
region: how many of the step's failed train tasks it solved without the region, how many solved tasks it
lost, and whether it named the region a likely cause. The skills compared on mbpp-bash are the seed
before 08c75dc, whose protected code format made the 1.5B reply with the file name alone
(perf/results/skill_variants-mbpp-bash.json), and the seed now.

Usage: python perf/protected_check.py --family mbpp-bash --seeds 0,1,3 --skills A.md,B.md [--out NAME] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.common import stop_runs_on_sigterm  # noqa: E402
from perf.knowledge_headroom import TARGET, measure  # noqa: E402
from perf.skill_variants import shown  # noqa: E402

NO_PROPOSALS = ("train.max_reflections_per_step=0", "train.rules_per_step=0", "train.demonstrations=false",
                "train.form_rules=false", "train.consolidate=false", "train.check_protected=true")


def check(family: str, seed: int, skill: Path, work: Path) -> dict:
    run_id = f"protected-{family}-{seed}-{skill.stem}"
    argv = [sys.executable, "-m", "skillopt", "--runs-dir", str(work / "runs"), "run", "--preset", "quick",
            "--benchmark", family, "--split-seed", str(seed), "--skill", str(skill), "--run-id", run_id,
            "--target_model", TARGET, "--optimizer_model", TARGET, "--val-size", "1", "--test-size", "0",
            "--progress", "none",
            *(x for s in NO_PROPOSALS for x in ("--set", s))]
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_AUTH_TOKEN"))}
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True)
    summary = work / "runs" / run_id / "summary.json"
    if done.returncode != 0 or not summary.exists():
        raise SystemExit(f"skillopt run failed (rc {done.returncode}): {(done.stderr or done.stdout)[-1500:]}")
    return {"family": family, "split_seed": seed, "skill": shown(skill), "run_id": run_id,
            "protected": json.loads(summary.read_text())["protected"], "argv": argv[2:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", required=True)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--skills", required=True, help="comma-separated SKILL.md files")
    ap.add_argument("--out", default="protected_check")
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    stop_runs_on_sigterm()
    work = args.work or Path(tempfile.mkdtemp(prefix="protected-"))
    work.mkdir(parents=True, exist_ok=True)
    skills = [Path(s).resolve() for s in args.skills.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    measure(args.out, work, lambda: [check(args.family, seed, skill, work) for seed in seeds for skill in skills])


if __name__ == "__main__":
    main()
