"""`skillopt run --benchmark swebench` on locally built images, the real Claude Code and Codex inside
the instances' containers, against the scripted fake model server, with a real Docker engine.

The scripted agent loads the skill the agent's native way, checks from inside its container that no
hidden test, gold patch or eval script is visible, and, when the skill holds the rule the optimizer
proposes, applies the fix in `/testbed` and finishes. The step must be accepted on patches graded by
the swebench harness rules in fresh containers. Also: kill -9 mid-rollout then resume (no container
left, nothing graded twice), the agent on the host driving the container's shell, and token capture
through the recording proxy from inside the container.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from skillopt.benchmarks.swe_grading import SweInstance, load_instances
from skillopt.benchmarks.swe_images import HEREDOC
from skillopt.benchmarks.swe_local import SHIPPED_TASKS
from tests.fakes.agent_scripts import shell_call, use_skill_call
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli
from tests.swe_docker import DATASET, IDS, containers, images, needs_docker, owned_by

pytest.importorskip("swebench", reason="the swe extra (swebench) is not installed: pip install 'skillopt[swe]'")
pytestmark = [needs_docker, pytest.mark.slow]

RULE = "Reproduce the failing check, then fix the code it points at."
SKILL = "task-solver"  # the seed skill's name (skills/default: swebench has no seed of its own)
CLEAN = "HIDDEN-CHECK: clean"
INSTANCES = {i.instance_id: i for i in load_instances(SHIPPED_TASKS) if i.instance_id in IDS}


def hidden_check(inst: SweInstance) -> str:
    """A shell command that, inside the agent's container, looks everywhere but /proc, /sys, /dev and the
    agent's own folders for the eval script, the gold patch and the hidden tests (by strings only they
    hold, base64-encoded here so the command never matches itself), and in git for the gold and test
    files' blobs and for any history; prints `HIDDEN-CHECK: clean` or what leaked."""
    marks = [HEREDOC] + re.findall(r"^index \w+\.\.\w+", inst.patch, re.M)
    marks += [ln[1:].strip() for ln in inst.test_patch.splitlines() if re.match(r"^\+\s*def test_\w+\(", ln)]
    blobs = re.findall(r"^index \w+\.\.(\w+)", inst.patch + inst.test_patch, re.M)
    encoded = " ".join(base64.b64encode(m.encode()).decode() for m in marks)
    return "\n".join([
        "leak=''; test -e /eval.sh && leak=\"$leak /eval.sh\"",
        f"for b in {encoded}; do p=$(echo \"$b\" | base64 -d)",
        "  grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev --exclude-dir=skillopt -- \"$p\" / "
        ">/dev/null && leak=\"$leak file:$b\"; done",
        f"for o in {' '.join(blobs)}; do git -C /testbed cat-file -e \"$o\" 2>/dev/null && leak=\"$leak blob:$o\"; done",
        "[ \"$(git -C /testbed rev-list --all | wc -l)\" = 1 ] || leak=\"$leak history\"",
        "echo \"HIDDEN-CHECK:${leak:- clean}\""])


def fix(inst: SweInstance) -> str:
    return f"cat > /tmp/fix.patch <<'EOF'\n{inst.patch}EOF\ngit apply /tmp/fix.patch && echo applied in $(pwd)"


def optimizer_reply(req: FakeRequest) -> FakeReply:
    edit = {"op": "add", "anchor": "", "text": RULE, "rationale": "the agent never tried a fix",
            "evidence": re.findall(r"FAILED task (\S+)", req.last_user_text)}
    return FakeReply(text=json.dumps({"analysis": "no fix was attempted", "edits": [edit]}))


class Agent:
    """The scripted agent: skill, hidden check, fix (only under the rule), done. `hold` pauses its first
    call until released (for kill -9 mid-rollout)."""

    def __init__(self, hold: bool = False):
        self.held = threading.Event()
        self.release = threading.Event()
        self.hold = hold

    def __call__(self, req: FakeRequest) -> FakeReply:
        if req.api == "chat":
            return optimizer_reply(req)
        if not req.tools:
            return FakeReply(text="ok")
        if self.hold and not self.held.is_set():
            self.held.set()
            self.release.wait(120)
        conversation = "\n".join(m.text for m in req.messages)
        inst = next(i for i in INSTANCES.values() if i.problem_statement.strip()[:200] in conversation)
        done = len(req.tool_results)
        if done == 0:
            return FakeReply(text="Loading the skill.", tool_calls=(use_skill_call(req, SKILL),))
        if done == 1:
            return FakeReply(text="Checking.", tool_calls=(shell_call(req, hidden_check(inst)),))
        if done == 2 and RULE in conversation:
            return FakeReply(text="Fixing.", tool_calls=(shell_call(req, fix(inst)),))
        return FakeReply(text="Done.")


def run_args(harness: str, srv: FakeModelServer, run_id: str, *extra: str) -> list[str]:
    target = (f"anthropic:fake-agent@{srv.base_url}" if harness == "claude-code"
              else f"openai:fake-agent@{srv.base_url}/v1")
    return ["run", "--benchmark", "swebench", "--harness", harness, "--harness-mode", "cli",
            "--target_model", target, "--optimizer_model", f"openai-compatible:fake-opt@{srv.openai_url}",
            "--set", f"benchmark_options.dataset={DATASET}", "--set", f"benchmark_options.instance_ids={','.join(IDS)}",
            "--set", "benchmark_options.memory=2g", "--set", "benchmark_options.cpus=1",
            "--run-id", run_id, "--epochs", "1", "--train-size", "1", "--val-size", "1", "--test-size", "1",
            "--batch-size", "1", "--set", "train.consolidate=false", "--set", "limits.timeout_s=180", *extra]


def records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module", autouse=True)
def built():
    images(IDS)


@pytest.mark.parametrize("harness", ["claude-code", "codex"])
def test_one_step_with_the_agent_inside_the_instance_container(harness, tmp_path):
    pytest.importorskip("claude_agent_sdk" if harness == "claude-code" else "codex_cli_bin",
                        reason=f"the {harness} extra is not installed")
    with FakeModelServer(Agent()) as srv:
        r = run_cli(run_args(harness, srv, "swe"), tmp_path, cli_env(tmp_path), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "runs" / "swe"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["status"] == "finished"
    rows = records(run)
    assert not [x for x in rows if x["error"]]
    # the seed has no rule: its rollouts change nothing; the step's candidate has it: its rollouts fix the bug
    # (one validation task is too few for the gate to accept it; the gate is not what this test is about)
    ruled = {int(p.stem[1:]) for p in (run / "skills").glob("v*.md") if RULE in p.read_text()}
    assert ruled and {x["version"] for x in rows} >= ruled | {0}
    for x in rows:
        assert x["hard"] == (1.0 if x["version"] in ruled else 0.0), (x["version"], x["feedback"])
        if x["hard"] == 1.0:
            assert "resolved" in x["feedback"] and ".claude" not in x["patch"] and ".agents" not in x["patch"]
        else:
            assert not x["patch"]
    for x in rows:
        events = [json.loads(e) for e in (run / x["trace_file"]).read_text().splitlines()]
        texts = [e.get("text", "") + e.get("output", "") for e in events]
        assert any(f"skill discovered: {SKILL}" in t for t in texts), "the skill was not discovered natively"
        assert any(e["type"] == "skill_used" for e in events)
        assert any(t.strip() == CLEAN for t in texts), [t for t in texts if "HIDDEN-CHECK" in t]
        if x["hard"] == 1.0:
            assert any("applied in /testbed" in t for t in texts)  # the agent worked inside the container
    assert containers("skillopt.run=swe") == []
    reports = list((run / "work" / "swe-logs").rglob("report.json"))
    assert len(reports) == len(rows)  # every rollout graded once, in a container, logs under the run


def test_kill_9_mid_rollout_then_resume_leaves_no_container_and_grades_nothing_twice(tmp_path):
    pytest.importorskip("claude_agent_sdk", reason="the claude-code extra is not installed")
    agent = Agent(hold=True)
    env = cli_env(tmp_path)
    with FakeModelServer(agent) as srv:
        args = run_args("claude-code", srv, "killed")
        proc = subprocess.Popen([sys.executable, "-m", "skillopt", *args], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert agent.held.wait(300), "the agent never called the model"
            alive = owned_by(proc.pid)
            assert alive, "no container of the run while its agent works"
            limits = json.loads(subprocess.run(["docker", "inspect", alive[0]], capture_output=True, text=True,
                                               check=True).stdout)[0]["HostConfig"]
            assert (limits["Memory"], limits["NanoCpus"], limits["PidsLimit"]) == (2 * 1024**3, 10**9, 4096)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        finally:
            agent.release.set()
            if proc.poll() is None:
                proc.kill()
        run = tmp_path / "runs" / "killed"
        before = records(run) if (run / "rollouts.jsonl").exists() else []
        assert containers("skillopt.run=killed"), "kill -9 left nothing to clean up: the test proves nothing"
        r = run_cli([*args, "--resume", "killed"], tmp_path, env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert containers("skillopt.run=killed") == []
    rows = records(run)
    assert len({x["key"] for x in rows}) == len(rows) and {x["key"] for x in before} <= {x["key"] for x in rows}
    reports = list((run / "work" / "swe-logs").rglob("report.json"))
    assert len(reports) == len(rows), "a rollout was graded twice (or not at all)"
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    assert [x for x in rows if x["hard"] == 1.0], "no patch was resolved"


def test_agent_on_the_host_drives_the_container_shell(tmp_path):
    """The other way: /testbed copied to the host workspace, commands run in the container through
    `.skillopt/env`; the patch is graded the same way."""
    pytest.importorskip("claude_agent_sdk", reason="the claude-code extra is not installed")
    inst = INSTANCES[IDS[0]]
    command = (f"{fix(inst)} && .skillopt/env 'test -f /.dockerenv && python -c \"import toolz; print(toolz.__file__)\"'")

    def script(req: FakeRequest) -> FakeReply:
        if not req.tools:
            return FakeReply(text="ok")
        if not req.tool_results:
            return FakeReply(tool_calls=(shell_call(req, command),))
        return FakeReply(text="Done.")

    skill = tmp_path / "SKILL.md"
    skill.write_text("---\nname: fixer\ndescription: Fix bugs.\n---\n# Fixer\nFix it.\n")
    with FakeModelServer(script) as srv:
        args = ["eval", "--skill", str(skill), "--benchmark", "swebench", "--split", "all", "--harness",
                "claude-code", "--target_model", f"anthropic:fake-agent@{srv.base_url}",
                "--set", f"benchmark_options.dataset={DATASET}", "--set", f"benchmark_options.instance_ids={IDS[0]}",
                "--set", "benchmark_options.agent_in_container=false", "--set", "harness_options.mode=cli"]
        refused = run_cli(args, tmp_path, cli_env(tmp_path), timeout=600)
        # the agent would hold the Docker socket: not inside the sandbox, only knowingly without it
        assert refused.returncode == 2 and "--no-sandbox" in refused.stderr and "Traceback" not in refused.stderr
        r = run_cli([*args, "--no-sandbox"], tmp_path, cli_env(tmp_path), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "hard 1.000" in r.stdout, r.stdout
    run = next((tmp_path / "runs").glob("eval-*"))
    rollout = records(run)[0]
    raw = (run / rollout["trace_file"]).read_text()
    assert "applied in " in raw and "/testbed/toolz/__init__.py" in raw  # edited here, imported there


def test_token_capture_from_inside_the_container(tmp_path):
    pytest.importorskip("claude_agent_sdk", reason="the claude-code extra is not installed")
    pytest.importorskip("agentlightning", reason='token capture needs pip install "skillopt[vllm]"')
    from tests.fakes.vllm import FakeVllm

    inst = INSTANCES[IDS[0]]

    def script(req: FakeRequest) -> FakeReply:
        if not req.tools:
            return FakeReply(text="ok")
        if not req.tool_results:
            return FakeReply(tool_calls=(shell_call(req, fix(inst)),))
        return FakeReply(text="Done.")

    skill = tmp_path / "SKILL.md"
    skill.write_text("---\nname: fixer\ndescription: Fix bugs.\n---\n# Fixer\nFix it.\n")
    vllm = FakeVllm(script)
    with FakeModelServer(vllm) as srv:
        r = run_cli(["eval", "--skill", str(skill), "--benchmark", "swebench", "--split", "all", "--harness",
                     "claude-code", "--target_model", f"vllm:fake-model@{srv.openai_url}",
                     "--set", f"benchmark_options.dataset={DATASET}", "--set", f"benchmark_options.instance_ids={IDS[0]}",
                     "--set", "harness_options.mode=cli"], tmp_path, cli_env(tmp_path), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "hard 1.000" in r.stdout, r.stdout
    run = next((tmp_path / "runs").glob("eval-*"))
    assert (run / "tokens" / f"stream_{IDS[0]}.jsonl").stat().st_size > 0
    assert (run / "tokens" / f"dataset-{IDS[0]}").is_dir()
    assert any(s.token_ids for s in vllm.sent)  # Claude Code, in the container, called vLLM through the proxy


def test_ctrl_c_mid_rollout_leaves_no_container(tmp_path):
    pytest.importorskip("claude_agent_sdk", reason="the claude-code extra is not installed")
    agent = Agent(hold=True)
    with FakeModelServer(agent) as srv:
        proc = subprocess.Popen([sys.executable, "-m", "skillopt", *run_args("claude-code", srv, "interrupted")],
                                cwd=tmp_path, env=cli_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        try:
            assert agent.held.wait(300), "the agent never called the model"
            assert owned_by(proc.pid), "no container while the agent works"
            proc.send_signal(signal.SIGINT)
            agent.release.set()
            proc.wait(120)
        finally:
            agent.release.set()
            if proc.poll() is None:
                proc.kill()
    assert owned_by(proc.pid) == [] and containers("skillopt.run=interrupted") == []


async def test_a_rollout_that_times_out_removes_its_container(tmp_path):
    """The harness's timeout ends the agent inside the container, and the container goes with it."""
    pytest.importorskip("claude_agent_sdk", reason="the claude-code extra is not installed")
    from skillopt.benchmarks import get_benchmark
    from skillopt.harness.base import Limits
    from skillopt.harness.registry import HarnessContext, make_harness
    from skillopt.harness.workspace import write_skill
    from skillopt.models import Models, ProviderEnv
    from skillopt.models.spec import parse_model_spec
    from skillopt.skill import Skill

    bench = get_benchmark("swebench", dataset=DATASET, instance_ids=IDS[0])
    task = bench.tasks("all")[0]
    skill = Skill.parse("---\nname: fixer\ndescription: Fix bugs.\n---\n# Fixer\nFix it.\n")
    harness = make_harness("claude-code", HarnessContext(models=Models(env=ProviderEnv()), options={"mode": "cli"}))
    ws = tmp_path / "ws"
    ws.mkdir()
    bench.prepare(task, ws)
    write_skill(ws, skill, harness.skill_dir)

    def slow(req: FakeRequest) -> FakeReply:
        if req.tools and not req.tool_results:
            return FakeReply(tool_calls=(shell_call(req, "python3 -c 'import time; time.sleep(600)'"),))
        return FakeReply(text="Done.")

    with FakeModelServer(slow) as srv:
        rollout = await harness.run(task, skill, ws, parse_model_spec(f"anthropic:fake@{srv.base_url}"),
                                    Limits(timeout_s=15))
    assert rollout.error and "timed out" in rollout.error
    assert owned_by(os.getpid()) == []
    bench.close()


async def test_an_agent_container_that_cannot_start_is_an_infrastructure_error(tmp_path):
    """No image: the rollout errors as infrastructure (retried later, never a score), nothing is left."""
    pytest.importorskip("claude_agent_sdk", reason="the claude-code extra is not installed")
    from skillopt.benchmarks.base import Task
    from skillopt.benchmarks.environment import TaskContainer
    from skillopt.harness.base import Limits
    from skillopt.harness.registry import HarnessContext, make_harness
    from skillopt.models import Models, ProviderEnv
    from skillopt.models.spec import parse_model_spec
    from skillopt.skill import Skill

    ws = tmp_path / "ws"
    ws.mkdir()
    TaskContainer(image="local/sweb.eval.x86_64.not-built:latest", instance="not-built").write(ws)
    harness = make_harness("claude-code", HarnessContext(models=Models(env=ProviderEnv()), options={"mode": "cli"}))
    skill = Skill.parse("---\nname: fixer\ndescription: Fix bugs.\n---\n# Fixer\nFix it.\n")
    task = Task(id="not-built", kind="swe", prompt="Fix it.")
    rollout = await harness.run(task, skill, ws, parse_model_spec("anthropic:fake@http://127.0.0.1:9"), Limits())
    assert rollout.error_kind == "infra" and "not-built" in (rollout.error or ""), rollout.error
    assert owned_by(os.getpid()) == []
