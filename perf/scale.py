"""Scale: how skillopt's own cost grows with the number of rollouts, against an instant fake model server.

For each size N (default 1,000 / 10,000 / 100,000): a run whose baseline evaluation scores N val tasks
(`skillopt run --val-size N --max-rollouts N`: the budget stops it right after, as a resumable run),
through the real CLI at concurrency 64. Recorded per size: wall time, the model calls' span (first
call to last call, at the server), skillopt's CPU time, peak RSS, the run folder's size.

On the largest run: `runs show`, `report`, `compare`, and `run --resume` (start-up: it loads the run
and stops at once, its budget spent). Then `runs list` over 1,000 runs, with and without the SQLite
index. Readers use the index when it answers for a run (see `store.index`), never parsing rollouts.jsonl.

Usage: python perf/scale.py [--sizes 1000 10000 100000] [--concurrency 64] [--runs 1000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf.common import REPO, InstantServer, dir_size, machine, measure, skillopt, write_result  # noqa: E402
from tests.helpers import cli_env, write_jsonl  # noqa: E402


def qa_rows(n: int) -> list[dict]:
    return [{"id": f"q{i:06d}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(n)]


def scale_run(tmp: Path, srv: InstantServer, n: int, concurrency: int) -> dict:
    data = write_jsonl(tmp / f"qa{n}.jsonl", qa_rows(n + 4))
    url = f"openai-compatible:fake-target@{srv.openai_url}"
    srv.reset()
    m = measure(skillopt("--runs-dir", str(tmp / "runs"), "run", "--benchmark", str(data), "--harness", "chat",
                         "--target-model", url, "--optimizer-model", url, "--run-id", f"scale-{n}",
                         "--train-size", "4", "--val-size", str(n), "--test-size", "0", "--epochs", "1",
                         "--batch-size", "4", "--concurrency", str(concurrency), "--max-rollouts", str(n)),
                tmp, cli_env(tmp))
    assert m.rc == 3, m.stderr[-2000:]  # exit code 3: stopped by its budget (resumable), as planned
    st = srv.stats()
    assert st["calls"] == n, (st["calls"], n)
    span = (st["last_call_at"] or 0) - (st["first_call_at"] or 0)
    run = tmp / "runs" / f"scale-{n}"
    return {"rollouts": n, "concurrency": concurrency, **m.as_dict(),
            "calls_span_s": round(span, 3),
            "start_to_first_call_s": round((st["first_call_at"] or 0) - m.started_at, 3),
            "last_call_to_exit_s": round(m.ended_at - (st["last_call_at"] or 0), 3),
            "overhead_ms_per_rollout": round(m.wall_s * 1000 / n, 3),
            "steady_ms_per_rollout": round(span * 1000 / max(1, n - 1), 3),
            "cpu_ms_per_rollout": round(m.cpu_s * 1000 / n, 3),
            "rollouts_per_s": round(n / span, 1) if span else None,
            "run_dir": dir_size(run), "rollouts_jsonl_bytes": (run / "rollouts.jsonl").stat().st_size}


def readers(tmp: Path, n: int) -> dict:
    """The commands that read a big run, and resuming it."""
    run_id, env, runs = f"scale-{n}", cli_env(tmp), str(tmp / "runs")
    out = {}
    for name, args in [
        ("runs_show", ["runs", "show", run_id]),
        ("report", ["report", run_id, "-o", str(tmp / "report.html")]),
        ("compare", ["compare", f"{run_id}:seed", f"{run_id}:best", "--split", "val", "--format", "json"]),
        ("resume_startup", ["run", "--resume", run_id, "--max-rollouts", str(n)]),
    ]:
        m = measure(skillopt("--runs-dir", runs, *args), tmp, env)
        assert m.rc in (0, 3), (name, m.stderr[-2000:])  # 3: the resume stops at its budget again
        out[name] = m.as_dict()
    return out


def runs_list(tmp: Path, srv: InstantServer, count: int) -> dict:
    """`runs list` over `count` small evaluation runs (made in this process, through the library)."""
    from skillopt.config import RunConfig
    from skillopt.engine.evaluate import evaluate_skill
    from skillopt.engine.listeners import recorders
    from skillopt.models.types import ProviderEnv
    from skillopt.store.refs import resolve_skill_ref

    runs = tmp / "many"
    data = write_jsonl(tmp / "qa3.jsonl", qa_rows(3))
    cfg = RunConfig.model_validate({"benchmark": str(data), "harness": "chat",
                                    "target_model": f"openai-compatible:fake-target@{srv.openai_url}"})
    ref = resolve_skill_ref(str(REPO / "skills" / "default" / "SKILL.md"), runs)
    for i in range(count):
        evaluate_skill(cfg.model_copy(update={"run_id": f"ev-{i:04d}"}), ref, "all", runs, ProviderEnv(),
                       recorders(runs))  # indexed, as `skillopt eval` indexes them
    env = cli_env(tmp)
    with_index = measure(skillopt("--runs-dir", str(runs), "runs", "list"), tmp, env)
    assert with_index.rc == 0, with_index.stderr
    shutil.move(runs / "skillopt.db", tmp / "moved.db")
    no_index = measure(skillopt("--runs-dir", str(runs), "runs", "list"), tmp, env)
    assert no_index.rc == 0, no_index.stderr
    return {"runs": count, "with_index": with_index.as_dict(), "without_index": no_index.as_dict()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--runs", type=int, default=1000, help="runs for `runs list` (0: skip)")
    ap.add_argument("--out", default="scale")
    args = ap.parse_args()
    doc: dict = {"machine": machine(), "command": "python perf/scale.py " + " ".join(sys.argv[1:]),
                 "server": "perf/instant_server.py (its own process, ~0.1 ms per request)", "sizes": []}
    with tempfile.TemporaryDirectory() as t, InstantServer() as srv:
        tmp = Path(t)
        startup = measure(skillopt("--version"), tmp, cli_env(tmp))
        doc["cli_start"] = startup.as_dict()
        for n in sorted(args.sizes):
            doc["sizes"].append(scale_run(tmp, srv, n, args.concurrency))
            print(json.dumps(doc["sizes"][-1]), flush=True)
            write_result(args.out, doc)
        doc["readers"] = {"rollouts": max(args.sizes), **readers(tmp, max(args.sizes))}
        print(json.dumps(doc["readers"]), flush=True)
        if args.runs:
            doc["runs_list"] = runs_list(tmp, srv, args.runs)
            print(json.dumps(doc["runs_list"]), flush=True)
        doc["machine_after"] = machine()["load_avg_1_5_15"]
    print(write_result(args.out, doc))


if __name__ == "__main__":
    main()
