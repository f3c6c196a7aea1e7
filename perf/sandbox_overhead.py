"""What the sandbox and the model relay cost: wall time per agent rollout (Claude Code, Codex, CLI
mode, against an instant fake model server), per SWE grading (the shipped swe-local task's gold
patch) and per mbpp-style code check, each with and without the sandbox, interleaved.

Usage: python perf/sandbox_overhead.py [--rounds 5] [--out perf/results/sandbox_overhead.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from skillopt.benchmarks.base import Task  # noqa: E402
from skillopt.harness.base import Limits  # noqa: E402
from skillopt.harness.registry import HarnessContext, make_harness  # noqa: E402
from skillopt.harness.workspace import write_skill  # noqa: E402
from skillopt.models import Models, ProviderEnv  # noqa: E402
from skillopt.models.spec import parse_model_spec  # noqa: E402
from skillopt.sandbox import Bubblewrap, NoSandbox, Relay, check_bwrap  # noqa: E402
from skillopt.skill import Skill  # noqa: E402
from tests.fakes.agent_scripts import run_command  # noqa: E402
from tests.fakes.server import FakeModelServer  # noqa: E402

SKILL = Skill.parse("---\nname: mathy\ndescription: Arithmetic.\n---\n# Mathy\nUse python.\n")
TASK = Task(id="t", prompt="What is 6*7? End with 'Answer: <number>'.")


async def agent_rollout(name: str, sandboxed: bool, srv: FakeModelServer, relay: Relay, root: Path) -> float:
    ctx = HarnessContext(models=Models(env=ProviderEnv(anthropic_api_key="k" * 20, openai_api_key="k" * 20)),
                         options={"mode": "cli"}, sandbox=Bubblewrap(check_bwrap()) if sandboxed else NoSandbox(),
                         relay=relay if sandboxed else None)
    harness = make_harness(name, ctx)
    ws = Path(tempfile.mkdtemp(dir=root))
    write_skill(ws, SKILL, harness.skill_dir)
    spec = f"anthropic:fake@{srv.base_url}" if name == "claude-code" else f"openai:fake@{srv.openai_url}"
    t0 = time.perf_counter()
    r = await harness.run(TASK, SKILL, ws, parse_model_spec(spec), Limits(timeout_s=120))
    assert r.error is None, r.error
    return time.perf_counter() - t0


def grading(sandboxed: bool) -> float:
    from skillopt.benchmarks import get_benchmark
    from skillopt.benchmarks.base import SplitSizes
    from skillopt.benchmarks.swe_grading import instance_of

    bench = get_benchmark("swe-local", SplitSizes())
    task = bench.tasks("all")[0]
    bench.isolate(Bubblewrap(check_bwrap()) if sandboxed else NoSandbox(), Path(tempfile.mkdtemp()))
    t0 = time.perf_counter()
    assert bench.grade(task, instance_of(task).patch).resolved
    return time.perf_counter() - t0


def code_check(sandboxed: bool) -> float:
    from skillopt.benchmarks.code import run_checks

    t0 = time.perf_counter()
    res = run_checks("def f(x):\n    return x + 1\n", [("assert f(1) == 2", True)],
                     sandbox=Bubblewrap(check_bwrap()) if sandboxed else None)
    assert res.passed == 1
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "perf" / "results" / "sandbox_overhead.json"))
    args = ap.parse_args()
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, Relay() as relay, \
            FakeModelServer(run_command("python3 -c 'print(6*7)'", "Answer: 42")) as srv:
        for _ in range(args.rounds):
            for sandboxed in (False, True):  # interleaved, so load on the machine hits both alike
                tag = "sandboxed" if sandboxed else "plain"
                for name in ("claude-code", "codex"):
                    times.setdefault(f"{name} rollout {tag}", []).append(
                        asyncio.run(agent_rollout(name, sandboxed, srv, relay, Path(tmp))))
                times.setdefault(f"swe-local grading {tag}", []).append(grading(sandboxed))
                times.setdefault(f"code check {tag}", []).append(code_check(sandboxed))
        relayed = relay.forwarded
    result: dict[str, object] = {"rounds": args.rounds, "relayed_requests": relayed}
    for what, ts in times.items():
        result[f"{what} median_s"] = round(statistics.median(ts), 3)
    for what in ("claude-code rollout", "codex rollout", "swe-local grading", "code check"):
        result[f"{what} overhead_s"] = round(float(result[f"{what} sandboxed median_s"])  # type: ignore[arg-type]
                                             - float(result[f"{what} plain median_s"]), 3)  # type: ignore[arg-type]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
