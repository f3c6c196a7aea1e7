"""Harvest figures on sessions the real binaries ran here: Claude Code and Codex (CLI mode, a
scripted fake model) on swe-local tasks, half of them failures; then `skillopt harvest` on their
transcripts, as a user would (from ~/.claude and ~/.codex).

A successful session writes the task's test first (its hidden test patch), runs the tests (they
fail), applies the fix, runs them again (they pass). A failed one runs the tests, breaks the file
the fix touches, runs the tests again (they fail), hits a failing command and gives up (Claude Code's
user then says it is wrong). Sentinels are planted: an e-mail address, a token and a path under
the home folder in each request, a password in a failing command's output, and a key-like
environment variable's value in the request (the CLI registers it for redaction).

Reports the share of sessions with a test run that yield a scored task (goal: >= 70%), the
sentinel bytes left in what harvest wrote (goal: 0), and how many scored tasks' checks fail on
the untouched start state (by confidence): a check that passes there cannot tell a fix from none.

Usage: python perf/harvest.py [--tasks 6] [--out perf/results/harvest.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.common import machine  # noqa: E402
from skillopt.benchmarks import SplitSizes, get_benchmark  # noqa: E402
from skillopt.benchmarks.base import RolloutOutput  # noqa: E402
from skillopt.benchmarks.swe_grading import instance_of, patch_files  # noqa: E402
from tests.harvest_agents import run_session, shell  # noqa: E402
from tests.helpers import cli_env, run_cli  # noqa: E402

EMAIL, TOKEN = "sentinel.dev@example.com", "ghp_SENTINEL0123456789abcdefghij0123"
PASSWORD, ENV_SECRET = "SENTINELpw98765432", "zzSENTINELenv1234567"


def test_command(inst) -> str:
    env = " ".join(f"{k}={v}" for k, v in inst.test_env.items())
    return f"{env} {sys.executable} -m pytest -q -p no:cacheprovider {' '.join(inst.directives)}".strip()


def apply(patch: str) -> str:
    return f"cat > /tmp/skillopt-perf-$$.patch <<'PATCH'\n{patch}PATCH\ngit apply /tmp/skillopt-perf-$$.patch && echo applied"


def session(harness: str, bench, task, home: Path, fail: bool) -> Path:
    inst = instance_of(task)
    ws = home / "src" / f"{harness}-{task.id}"
    ws.mkdir(parents=True)
    bench.prepare(task, ws)
    cmd = test_command(inst)
    ask = (f"{task.prompt}\n\nPing me at {EMAIL} if stuck. My token: {TOKEN} (and {ENV_SECRET}). "
           f"Logs are in {home}/logs/sentinel.log.")
    if fail:
        target = patch_files(inst.patch)[0]
        steps = [shell(cmd), shell(f"printf '\\nthis is not python\\n' >> {target}"), shell(cmd),
                 shell(f"printf 'password={PASSWORD}\\n'; exit 1")]
        return run_session(harness, ws, ask, steps, "I could not fix it.",
                           follow_up="No, that's wrong: the tests still fail." if harness == "claude-code" else None,
                           timeout_s=300)
    steps = [shell(apply(inst.test_patch)), shell(cmd), shell(apply(inst.patch)), shell(cmd)]
    return run_session(harness, ws, ask, steps, "Fixed, the tests pass.", timeout_s=300)


def gather(harness: str, transcript: Path, home: Path) -> None:
    """Where the agent would have kept it in the user's own home."""
    if harness == "claude-code":
        dest = home / ".claude" / "projects" / transcript.parent.name / transcript.name
    else:
        dest = home / ".codex" / "sessions" / transcript.relative_to(transcript.parents[3])
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(transcript, dest)


def sentinel_bytes(data: bytes, home: Path) -> dict[str, int]:
    found = {name: data.count(s.encode()) * len(s.encode()) for name, s in
             (("email", EMAIL), ("token", TOKEN), ("password", PASSWORD), ("env_secret", ENV_SECRET),
              ("home_path", str(home)))}
    found["SENTINEL_word"] = data.count(b"SENTINEL") * len(b"SENTINEL")
    return found


async def start_state_scores(out: Path, home: Path, root: Path) -> dict[str, str]:
    """Each scored task's check on its start state, untouched (the `harvest:OUT` benchmark, as a
    run would score an agent that changed nothing): a check that fails there tells a fix from no fix."""
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(home)  # `~` in the harvested paths
    try:
        bench = get_benchmark(f"harvest:{out}", SplitSizes(train=0, val=0, test=None))
        by_conf: dict[str, list[int]] = {}
        for task in bench.tasks("all"):
            ws = root / task.id
            ws.mkdir(parents=True)
            bench.prepare(task, ws)
            score = await bench.score(task, RolloutOutput(), ws)
            by_conf.setdefault(task.metadata["confidence"], []).append(int(score.hard == 0))
    finally:
        os.environ["HOME"] = saved or ""
    return {k: f"{sum(v)}/{len(v)}" for k, v in sorted(by_conf.items())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=6, help="swe-local tasks per binary (half fail)")
    ap.add_argument("--out", type=Path, default=REPO / "perf" / "results" / "harvest.json")
    args = ap.parse_args()
    bench = get_benchmark("swe-local")
    tasks = bench.tasks("all")[: args.tasks]
    root = Path(tempfile.mkdtemp(prefix="skillopt-perf-harvest-"))
    home = root / "home-sentinel-kq7z"
    result: dict = {"machine": machine(), "tasks_per_binary": len(tasks), "binaries": {}}
    try:
        for harness in ("claude-code", "codex"):
            t0 = time.perf_counter()
            for n, task in enumerate(tasks):
                gather(harness, session(harness, bench, task, home, fail=n % 2 == 1), home)
            made_s = time.perf_counter() - t0
            out = root / f"out-{harness}"
            env = cli_env(home, SENTINEL_API_KEY=ENV_SECRET)
            t0 = time.perf_counter()
            r = run_cli(["harvest", "--from", harness, "-o", str(out)], cwd=root, env=env)
            if r.returncode != 0:
                raise SystemExit(f"harvest failed: {r.stderr}")
            harvest_s = time.perf_counter() - t0
            report = json.loads((out / "harvest.json").read_text())
            rows = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
            written = b"".join(p.read_bytes() for p in out.iterdir())
            transcripts = b"".join(p.read_bytes() for p in (home / (".claude" if harness == "claude-code" else ".codex"))
                                   .rglob("*.jsonl"))
            left = sentinel_bytes(written, home)
            at_start = asyncio.run(start_state_scores(out, home, root / f"ws-{harness}"))
            result["binaries"][harness] = {
                "sessions": report["files_read"], "kept": report["kept"], "scored": report["scored"],
                "with_test_run": report["with_test_run"], "with_test_run_scored": report["with_test_run_scored"],
                "share_scored": round(report["with_test_run_scored"] / max(1, report["with_test_run"]), 3),
                "outcomes": {k: sum(1 for t in rows if t["outcome"] == k) for k in ("success", "failure", "unknown")},
                "confidence": {k: sum(1 for t in rows if t["check"]["confidence"] == k) for k in ("high", "medium", "low")},
                "signals": sorted({s["kind"] for t in rows for s in t["signals"]}),
                "check_fails_at_start": at_start,
                "sentinel_bytes_in_transcripts": sum(sentinel_bytes(transcripts, home).values()),
                "sentinel_bytes_written": sum(left.values()), "sentinel_bytes_written_by_kind": left,
                "sessions_wall_s": round(made_s, 1), "harvest_wall_s": round(harvest_s, 2),
            }
            print(harness, json.dumps(result["binaries"][harness]), flush=True)
        b = result["binaries"].values()
        with_runs = sum(x["with_test_run"] for x in b)
        result["share_scored"] = round(sum(x["with_test_run_scored"] for x in b) / max(1, with_runs), 3)
        result["sentinel_bytes_written"] = sum(x["sentinel_bytes_written"] for x in b)
        result["goals"] = {"share_scored>=0.70": result["share_scored"] >= 0.70,
                           "sentinel_bytes==0": result["sentinel_bytes_written"] == 0}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("share_scored", "sentinel_bytes_written", "goals")}))


if __name__ == "__main__":
    main()
