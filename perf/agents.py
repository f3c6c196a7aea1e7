"""Agent harnesses on coding benchmarks with the embedded models (no key): how the seed skill does.

For each harness and benchmark, `skillopt eval` scores the seed skill on `--n` test tasks through the
real CLI (the real agent, the embedded llama.cpp model, bubblewrap, the relay), then this script reads
the eval run's record: solve rate, the share of rollouts that loaded the skill, turns, prompt and
generated tokens (and the prompt tokens the server reused from its cache, where the agent's log
has them: mini-swe-agent), wall per rollout, and the failure kinds read from the traces
(`skillopt.traces.outcome.failure_kinds`: no tool call, shell rejected a command, wrong file, tests
never run, edit did not apply, time-out). Writes perf/results/agents.json: `rows` (one per harness and benchmark) and `lift`.

Usage:
    python perf/agents.py [--harness mini-swe-agent,claude-code,codex] [--benchmark swe-local,mbpp]
                          [--n 4] [--target local:qwen2.5-coder-1.5b] [--timeout 300] [--max-turns 10]
                          [--concurrency 2] [--option action_format=text] [--skill PATH]
                          [--out perf/results/agents.json]

The skill scored is the benchmark's seed (skills/<benchmark>/SKILL.md, else skills/default), as a
training run starts from; `--skill` scores a hand-written one instead, on the same tasks: what a
skill can do for this agent and model at all, before asking whether the optimizer finds it.

`--train` also makes one training run per harness and benchmark (`--n` train, validation and sealed
test tasks, one epoch) and writes `lift`: seed vs best on the test split, paired (`delta`, `ci_low`,
`ci_high`: the run's own 95% interval) and the lines the accepted edits added. Without it `lift`
is empty, with a note.
`--gepa RUN_DIR` puts GEPA 0.1.4 beside a finished `--train` run (`perf/gepa_agents.py`): its
adapter drives the same agent with the run's settings on the run's train and val tasks, within the
rollouts the run spent before its test split, and its best skill is paired with the run's seed and
best on the run's test tasks (`gepa` in the JSON).
A row already in the output file for another harness, benchmark, target, option set or skill is kept
(measure one at a time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.common import commit, machine, measure, skillopt  # noqa: E402

SKILLS = REPO / "skills"


def seed_of(benchmark: str) -> Path:
    """The seed skill a run of this benchmark starts from: its own (skills/mbpp), else the default."""
    own = SKILLS / benchmark / "SKILL.md"
    return own if own.is_file() else SKILLS / "default" / "SKILL.md"


def skill_of(benchmark: str, a: argparse.Namespace) -> Path:
    """The skill the eval scores: `--skill` (a hand-written one, to see what a skill can do), else the seed."""
    return Path(a.skill).resolve() if a.skill else seed_of(benchmark)


CODE_SOLUTION = "solution.py"  # what the code benchmarks grade (skillopt.benchmarks.code)


def gold_files(benchmark: str) -> dict[str, list[str]]:
    """Per task id, the files the reference fix changes (for "wrong file")."""
    from skillopt.traces.outcome import diff_files

    if benchmark == "swe-local":
        from skillopt.benchmarks.swe_local import SHIPPED_TASKS

        rows = [json.loads(x) for x in SHIPPED_TASKS.read_text().splitlines() if x.strip()]
        return {r["instance_id"]: diff_files(r["patch"]) for r in rows}
    return {}


def eval_run(harness: str, benchmark: str, a: argparse.Namespace, runs: Path) -> tuple[Path, dict]:
    argv = skillopt("--runs-dir", str(runs), "eval", "--skill", str(skill_of(benchmark, a)), "--benchmark", benchmark,
                    "--split", "test", "--harness", harness, "--target_model", a.target,
                    "--concurrency", str(a.concurrency), "--set", "splits.train=1", "--set", "splits.val=1",
                    "--set", f"splits.test={a.n}", "--set", f"limits.timeout_s={a.timeout}",
                    "--set", f"limits.max_turns={a.max_turns}", "--set", f"limits.max_tokens={a.max_tokens}",
                    *[x for o in a.option for x in ("--set", f"harness_options.{o}")],
                    *[x for o in a.sets for x in ("--set", o)])  # after the sizes above: `--set splits.test=36` wins
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    m = measure(argv, REPO, env, timeout=a.n * a.timeout * 2 + 900)
    if m.rc != 0:
        raise SystemExit(f"{harness} on {benchmark}: skillopt eval failed ({m.rc}): {m.stderr[-2000:]}")
    run = max((p for p in runs.iterdir() if p.name.startswith("eval-")), key=lambda p: p.stat().st_mtime)
    return run, {"wall_s": m.wall_s, "cpu_s": m.cpu_s}


def row_of(harness: str, benchmark: str, run: Path, measured: dict) -> dict:
    from skillopt.traces.events import UsageEvent, parse_event
    from skillopt.traces.outcome import failure_kinds

    gold = gold_files(benchmark)
    records = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines() if x.strip()]
    scored = [r for r in records if r.get("error_kind") != "infra"]
    kinds: Counter[str] = Counter()
    turns, cached = [], []
    for r in scored:
        events = [parse_event(x) for x in (run / r["trace_file"]).read_text().splitlines() if x.strip()]
        turns.append(sum(e.turns or 0 for e in events if isinstance(e, UsageEvent)))
        files = gold.get(r["task_id"]) or ([CODE_SOLUTION] if benchmark != "swe-local" else [])
        kinds.update(failure_kinds(events, r.get("error"), r.get("patch"), files))
        raw = run / r["trace_file"].removesuffix(".jsonl")
        raw = raw.with_name(raw.name + ".raw.log")
        if raw.is_file():
            cached.append(_cached_tokens(raw))
    mean = (lambda xs: round(statistics.fmean(xs), 3) if xs else None)
    loaded = [r["skill_used"] for r in scored if r.get("skill_used") is not None]
    return {"harness": harness, "benchmark": benchmark, "n": len(scored),
            "seed_solve": mean([r["hard"] for r in scored]),
            "skill_loaded": mean([1.0 if x else 0.0 for x in loaded]),
            "turns": mean(turns), "prompt_tokens": mean([r["input_tokens"] for r in scored]),
            "completion_tokens": mean([r["output_tokens"] for r in scored]),
            "cached_prompt_tokens": mean([c for c in cached if c is not None]),
            "wall_s": mean([r["duration_s"] for r in scored]),
            "failure_kinds": dict(sorted(kinds.items())),
            "errored": len(records) - len(scored), "eval_wall_s": measured["wall_s"], "eval_cpu_s": measured["cpu_s"],
            "run": run.name}


def train_run(harness: str, benchmark: str, a: argparse.Namespace, runs: Path) -> dict:
    """`--train`: one training run (the embedded model as target and optimizer), seed vs best on its
    sealed test split: the paired delta with its 95% interval (the run's own `test_delta`), and the
    lines the accepted edits added to the skill."""
    run_id = f"agents-{harness}-{benchmark}"
    argv = skillopt("--runs-dir", str(runs), "run", "--benchmark", benchmark, "--harness", harness,
                    "--target_model", a.target, "--optimizer_model", a.optimizer or a.target, "--run-id", run_id,
                    "--epochs", "1", "--train-size", str(a.n), "--val-size", str(a.n), "--test-size", str(a.n),
                    "--batch-size", str(a.batch_size or min(a.n, 4)), "--concurrency", str(a.concurrency),
                    "--set", f"limits.timeout_s={a.timeout}", "--set", f"limits.max_turns={a.max_turns}",
                    "--set", f"limits.max_tokens={a.max_tokens}",
                    *[x for o in a.option for x in ("--set", f"harness_options.{o}")],
                    *[x for o in a.sets for x in ("--set", o)])
    m = measure(argv, REPO, {**os.environ, "PYTHONPATH": str(REPO)}, timeout=a.n * a.timeout * 12 + 1800)
    if m.rc != 0:
        raise SystemExit(f"{harness} on {benchmark}: skillopt run failed ({m.rc}): {m.stderr[-2000:]}")
    return {**lift_of(runs / run_id), "run_wall_s": m.wall_s}


def lift_of(run: Path) -> dict:
    """A finished training run's lift: seed and best on its test split, the paired delta with its 95%
    interval (the run's own), the kinds of the accepted candidates and the lines they added."""
    import difflib


    summary = json.loads((run / "summary.json").read_text())
    import yaml

    config = yaml.safe_load((run / "config.yaml").read_text()) or {}
    delta = summary.get("test_delta") or {}
    seed = (run / "skills" / "v000.md").read_text().splitlines()
    best = (run / "best_skill.md").read_text().splitlines()
    added = [ln[1:] for ln in difflib.unified_diff(seed, best, lineterm="", n=0)
             if ln.startswith("+") and not ln.startswith("+++") and ln[1:].strip()]
    scores = summary.get("scores") or {}
    origins = [c.get("origin") for path in sorted((run / "steps").glob("*/candidates.json"))
               for c in json.loads(path.read_text()) if c.get("status") == "accepted"]
    return {"harness": config.get("harness"), "benchmark": config.get("benchmark"),
            "n": ((scores.get("seed") or {}).get("test") or {}).get("n"),
            "seed_test": ((scores.get("seed") or {}).get("test") or {}).get("hard"),
            "best_test": ((scores.get("best") or {}).get("test") or {}).get("hard"),
            "delta": delta.get("mean"), "ci_low": delta.get("lo"), "ci_high": delta.get("hi"),
            "wins": summary.get("test_wins"), "losses": summary.get("test_losses"), "accepted": origins,
            "accepted_edits": added, "edits_accepted": summary.get("edits_accepted"), "steps": summary.get("steps"),
            "run": run.name, **protocol_of(config)}


REPORT_SEEDS = 100  # split seeds from here on are report seeds: run once, on frozen code (seeds 0-4 are for development)


def protocol_of(config: dict) -> dict:
    """The run's split seed and whether its figure is a development or a report one."""
    seed = int((config.get("splits") or {}).get("seed") or 0)
    return {"split_seed": seed, "protocol": "report" if seed >= REPORT_SEEDS else "development"}


def _setting(row: dict) -> tuple:
    """What a row measured: the harness, benchmark, target and harness options."""
    return row["harness"], row["benchmark"], row.get("target"), ",".join(row.get("options") or [])


def row_key(row: dict) -> tuple:
    """One eval row per setting, skill, task count and turn budget (a larger sample of the same setting
    keeps the smaller one beside it)."""
    return (*_setting(row), row.get("skill"), row.get("n"), row.get("max_turns"))


def lift_key(row: dict) -> tuple:
    """One lift row per setting and split seed (a report run keeps the development runs beside it)."""
    return (*_setting(row), row.get("split_seed", 0))


def options_of(config: dict) -> list[str]:
    """A run's harness options as `--option` gives them (KEY=VALUE)."""
    return [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in (config.get("harness_options") or {}).items()]


def recorded(run: Path, command: str, at: str | None = None) -> dict:
    """The lift row of a finished training run, its settings read from the run's config."""
    import yaml

    config = yaml.safe_load((run / "config.yaml").read_text()) or {}
    limits, train = config.get("limits") or {}, config.get("train") or {}
    return {**lift_of(run), "target": config.get("target_model"), "options": options_of(config),
            "timeout_s": limits.get("timeout_s"), "max_turns": limits.get("max_turns"),
            "max_tokens": limits.get("max_tokens"), "command": command, "recorded_from": str(run),
            **({"commit": at} if at else {}),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime((run / "summary.json").stat().st_mtime)),
            "settings": {k: train.get(k) for k in ("batch_size", "max_reflections_per_step", "rules_per_step",
                                                   "trajectory_reflections", "consolidate")}}


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _cached_tokens(raw: Path) -> int | None:
    """The prompt tokens the server took from its cache, summed over a mini-swe-agent rollout's calls."""
    total, seen = 0, False
    for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith('{"mini"'):
            usage = ((json.loads(line).get("message") or {}).get("extra") or {}).get("usage")
            if usage:
                seen, total = True, total + int(usage.get("cached_tokens") or 0)
    return total if seen else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--harness", default="mini-swe-agent,claude-code,codex")
    p.add_argument("--benchmark", default="swe-local,mbpp")
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--target", default="local:qwen2.5-coder-1.5b")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--max-turns", type=int, default=10)
    p.add_argument("--max-tokens", type=int, default=1024, help="per model reply")
    p.add_argument("--option", action="append", default=[], help="a harness option, KEY=VALUE (repeatable)")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--skill", help="score this SKILL.md instead of the benchmark's seed (a hand-written skill: "
                                   "what a skill can do for this agent and model)")
    p.add_argument("--train", action="store_true", help="also measure lift: a training run per harness and benchmark")
    p.add_argument("--batch-size", type=int, help="with --train: train tasks per step (default: min(n, 4))")
    p.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE",
                   help="with --train: a setting of the training run (repeatable)")
    p.add_argument("--record", metavar="RUN_DIR", help="add the lift row of a finished --train run (kept with "
                   "--keep) read with this script's code, running nothing")
    p.add_argument("--record-command", help="with --record: the command that made the run")
    p.add_argument("--at", help="with --record: the commit the run was made at")
    p.add_argument("--lift-only", action="store_true", help="with --train: the training run only, no seed eval row")
    p.add_argument("--optimizer", help="the optimizer model of --train (default: the target)")
    p.add_argument("--keep", help="keep the eval runs in this folder (default: a temporary one)")
    p.add_argument("--gepa", metavar="RUN_DIR", help="GEPA 0.1.4 beside a finished --train run: the same agent, "
                   "tasks, models and rollout budget, paired on its test tasks (perf/gepa_agents.py)")
    p.add_argument("--gepa-work", help="with --gepa: GEPA's folder (default: a new one under /tmp)")
    p.add_argument("--out", default=str(REPO / "perf" / "results" / "agents.json"))
    a = p.parse_args()
    if a.lift_only and not a.train:
        p.error("--lift-only goes with --train")
    out = Path(a.out)
    doc = json.loads(out.read_text()) if out.is_file() else {}
    rows = {row_key(r): r for r in doc.get("rows", [])}
    lift = {lift_key(r): r for r in doc.get("lift", [])}
    gepa = {lift_key(r): r for r in doc.get("gepa", [])}
    t0 = time.time()
    head, clean = commit(REPO, ("skillopt", "skills", "perf/agents.py"))  # the code a --train run is made with
    argv = sys.argv[1:]
    dropped = {i for i, x in enumerate(argv) if x.startswith("--keep")} | {
        i + 1 for i, x in enumerate(argv) if x in ("--keep", "--out")} | {i for i, x in enumerate(argv) if x == "--out"}
    command = "python perf/agents.py " + " ".join(x for i, x in enumerate(argv) if i not in dropped)
    if a.record:
        row = recorded(Path(a.record), a.record_command or command, a.at)
        lift[lift_key(row)] = row
        a.train = True
    if a.gepa:
        from perf.gepa_agents import beside

        work = Path(a.gepa_work or tempfile.mkdtemp(prefix="skillopt-gepa-agents-"))
        row = {**beside(Path(a.gepa), work), "command": command, "commit": head, "clean": clean,
               "date": machine()["date"], "work": str(work)}
        gepa[lift_key(row)] = row
        print(json.dumps(row), flush=True)
    with tempfile.TemporaryDirectory(prefix="skillopt-perf-agents-") as tmp:
        runs = Path(a.keep) if a.keep else Path(tmp)
        runs.mkdir(parents=True, exist_ok=True)
        for harness in a.harness.split(",") if not (a.record or a.gepa) else []:
            for benchmark in a.benchmark.split(","):
                if not a.lift_only:
                    run, measured = eval_run(harness, benchmark, a, runs)
                    row = row_of(harness, benchmark, run, measured)
                    here = machine()
                    row.update(target=a.target, timeout_s=a.timeout, max_turns=a.max_turns, max_tokens=a.max_tokens,
                               options=a.option, skill=_shown(skill_of(benchmark, a)), command=command,
                               date=here["date"], cpu=here["cpu"], load_avg_1_5_15=here["load_avg_1_5_15"])
                    rows[row_key(row)] = row
                    print(json.dumps(row), flush=True)
                if a.train:
                    row = {**train_run(harness, benchmark, a, runs), "target": a.target, "options": a.option,
                           "timeout_s": a.timeout, "max_turns": a.max_turns, "max_tokens": a.max_tokens,
                           "settings": a.sets, "command": command, "date": machine()["date"], "commit": head,
                           "clean": clean}
                    lift[lift_key(row)] = row
                    print(json.dumps(row), flush=True)
    doc = {"what": "agent harnesses on coding benchmarks with the embedded model, the seed skill "
                   "(the benchmark's own under skills/, else skills/default); means per scored rollout",
           "command": command, "machine": machine(), "took_s": round(time.time() - t0, 1),
           "rows": list(rows.values()), "lift": list(lift.values()), "gepa": list(gepa.values()),
           "notes": doc.get("notes", [])}
    if not lift:
        doc["lift_note"] = "not measured: run with --train (a training run per harness and benchmark)"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out} in {doc['took_s']}s")


if __name__ == "__main__":
    main()
