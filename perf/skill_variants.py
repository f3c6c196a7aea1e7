"""Several versions of one skill, each scored on the same tasks and paired against the first.

When a question is about the skill's own text (does this section help, does this wording make the
target fail), the answer is a paired comparison on the same tasks, with no optimizer in the way. Per
family and split seed (the quick preset's split sizes and answer length, as perf/suite.py runs them)
each skill file is scored by the real CLI (`skillopt eval`, one run at a time) on the splits asked
for; the first file is the base, and each other is paired against it on the tasks both scored
(`stats.paired_lift`, the interval `skillopt compare` shows), with what the gate, set as a run sets
it, would decide on the validation pairs. Errored (infrastructure) rollouts are left out of both sides.

Besides the score, it counts the degenerate replies a file-writing task invites in a chat harness:
a reply whose code block holds only the name of the file the task says to write (`solution.sh`).

Usage: python perf/skill_variants.py --family mbpp-bash --seeds 0,1 --skills A.md,B.md[,...]
                                     [--splits val,test] [--out NAME] [--work DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.common import stop_runs_on_sigterm  # noqa: E402
from perf.knowledge_headroom import against, measure, preset_config, score  # noqa: E402
from skillopt.benchmarks.code import LANGUAGES  # noqa: E402
from skillopt.store.run_store import RunStore  # noqa: E402


FILE_NAMES = {lang.solution_file for lang in LANGUAGES.values()}  # the files a code task says to write


def names_a_file_only(reply: str) -> bool:
    """The reply is a code block holding only the name of the file the task says to write."""
    lines = [x.strip() for x in reply.strip().splitlines() if not x.strip().startswith("```")]
    return len(lines) == 1 and lines[0] in FILE_NAMES


def file_name_replies(run_dirs: list[Path]) -> int:
    """Replies that are one code block holding only a file name (`solution.sh`, `solution.py`)."""
    return sum(names_a_file_only(r.output) for d in run_dirs for r in RunStore(d).rollouts() if not r.errored)


def shown(path: Path) -> str:
    """The skill file as the rows name it: relative to the repository when it is in it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def rows_for(family: str, seed: int, skills: list[Path], splits: list[str], work: Path) -> list[dict]:
    cfg = preset_config(family, seed)
    rows, base = [], {}
    for i, skill in enumerate(skills):
        runs = [score(skill, family, split, cfg, work) for split in splits]
        hard = {t: v for r in runs for t, v in r["hard"].items()}
        row = {"family": family, "split_seed": seed, "splits": splits, "skill": shown(skill),
               "skill_text": skill.read_text(), "hard": round(sum(hard.values()) / len(hard), 4) if hard else None,
               "n": len(hard), "errored": sum(r["errored"] for r in runs), "runs": [r["run_id"] for r in runs],
               "file_name_replies": file_name_replies([work / "runs" / r["run_id"] for r in runs]),
               "by_split": {split: round(sum(r["hard"].values()) / max(1, len(r["hard"])), 4)
                            for split, r in zip(splits, runs)},
               "wall_s": round(sum(r["wall_s"] for r in runs), 1), "eval_argv": runs[0]["argv"]}
        if i == 0:
            base = hard
        else:
            row["versus"] = shown(skills[0])
            row.update(against(base, hard, family, cfg, splits))
        rows.append(row)
        print(f"{family} {seed} {shown(skill)}: hard {row['hard']} n={row['n']} file-name {row['file_name_replies']} "
              f"{row.get('delta', '')} [{row.get('ci_low', '')}, {row.get('ci_high', '')}]", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", required=True)
    ap.add_argument("--seeds", default="0", help="split seeds, comma-separated")
    ap.add_argument("--skills", required=True, help="SKILL.md files, comma-separated; the first is the base")
    ap.add_argument("--splits", default="val,test", help="the splits scored (paired over their union)")
    ap.add_argument("--work", help="folder for the runs (default: a new temporary folder)")
    ap.add_argument("--out", default="skill_variants", help="result name under perf/results/")
    args = ap.parse_args()
    stop_runs_on_sigterm()
    skills = [Path(s).resolve() for s in args.skills.split(",")]
    missing = [str(s) for s in skills if not s.is_file()]
    if missing or len(skills) < 2:
        raise SystemExit(f"--skills needs two or more SKILL.md files that exist (missing: {missing})")
    work = Path(args.work or tempfile.mkdtemp(prefix="skill-variants-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    seeds, splits = [int(s) for s in args.seeds.split(",")], args.splits.split(",")
    measure(args.out, work,
            lambda: [row for seed in seeds for row in rows_for(args.family, seed, skills, splits, work)])


if __name__ == "__main__":
    main()
